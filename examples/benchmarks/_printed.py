"""What the benchmarks that re-measure a search's printed command share: the llama-server settings and the
prompt mix that search measured with, and one measurement of an argv on a fresh llama-server."""

from __future__ import annotations

import difflib
from pathlib import Path

import optuna

from autotune.engines.server_process import ServerProcess
from autotune.engines.server_requests import generate_mix
from autotune.measure.prompts import PromptMix
from autotune.race.confirm import study_prompt_mix
from autotune.spec.command import ServerCommand


def searched(home: str | Path) -> tuple[ServerCommand, PromptMix, int]:
    """The server command, prompt mix and output length of the search stored in the data dir `home`."""
    storage = f"sqlite:///{home}/autotune.db"
    summary = optuna.get_all_study_summaries(storage)[0]
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    mix, max_tokens = study_prompt_mix(study)
    return ServerCommand.from_dict(study.user_attrs["llama_server"]), mix, max_tokens


def fresh_tok_s(argv: list[str], prompts: list, max_tokens: int, command: ServerCommand) -> float:
    """`argv`'s decode tok/s over `prompts` ((prompt, tokens) pairs) on a llama-server started for it alone."""
    with ServerProcess(argv, startup_timeout_s=120, request_timeout_s=600) as server:
        return generate_mix(server, prompts, max_tokens, command.sampling).mix_tok_s


def spec_flags(argv: list[str], plain: list[str]) -> str:
    """The flags `argv` adds to the plain command `plain`: what names its speculative settings."""
    matcher = difflib.SequenceMatcher(a=plain, b=argv, autojunk=False)
    added = [t for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("insert", "replace") for t in argv[j1:j2]]
    return " ".join(added) or "(the plain command)"
