"""The `autotune` command line: thin commands that parse options, call the library and print.

Library errors (autotune.errors) become one-line messages with exit code 2 for bad input and 1 for
run-time failures. Set AUTOTUNE_DEBUG=1 to see the traceback of an unexpected error instead.
Ctrl-C, SIGTERM and SIGHUP stop a command cleanly with exit code 128 + the signal's number
(autotune.interrupts); one the parent ignored (a background job's SIGINT) stays ignored.
"""

from __future__ import annotations

import os
import sys

import click

from autotune import __version__
from autotune.errors import AutotuneError
from autotune.interrupts import Interrupted, handle_stop_signals

DEBUG_ENV = "AUTOTUNE_DEBUG"


class AutotuneGroup(click.Group):
    """Turns AutotuneError into `autotune: error: ...` and its exit code, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            click.echo(f"autotune: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            _exit_interrupted(exc)


@click.group(cls=AutotuneGroup)
@click.version_option(__version__, prog_name="autotune")
def cli() -> None:
    """Find the fastest llama.cpp speculative-decoding settings for this machine and a model.

    \b
    Example:
        autotune search --model gemma3-270m
        autotune best --model gemma3-270m
    """


def main() -> None:
    """The console script: Click's own usage errors also become one line with exit code 2."""
    handle_stop_signals()
    try:
        cli.main(prog_name="autotune", standalone_mode=False)
    except click.ClickException as exc:
        click.echo(f"autotune: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:  # Click's wrapping of a KeyboardInterrupt outside a command
        _exit_interrupted(exc.__context__)
    except KeyboardInterrupt as exc:
        _exit_interrupted(exc)


def _exit_interrupted(exc: BaseException | None) -> None:
    """Say which signal stopped us and exit with 128 + its number (130 for a plain KeyboardInterrupt)."""
    interrupted = exc if isinstance(exc, Interrupted) else Interrupted()
    try:
        click.echo(f"autotune: interrupted by {interrupted}", err=True)
    except OSError:
        pass  # SIGHUP: the terminal that would show it is gone
    sys.exit(interrupted.exit_code)


def _register() -> None:
    from autotune.cli.doctor import doctor
    from autotune.cli.fleet import nightly, presets
    from autotune.cli.models import models, quantize
    from autotune.cli.pull import pull
    from autotune.cli.report import report
    from autotune.cli.study import best, confirm, prune, search, trials

    for command in (search, best, trials, prune, confirm, nightly, presets, models, quantize, report, pull, doctor):
        cli.add_command(command)


_register()
