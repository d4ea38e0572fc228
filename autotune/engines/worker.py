"""The python engine in a worker process: a llama.cpp abort, a segfault or the OOM killer fails one
trial, not the study.

`WorkerEngine` is what `create_engine("python")` returns. Its worker, started with multiprocessing's
spawn context (a fork of a process whose llama.cpp threads hold locks would inherit them held), holds
a real PythonEngine built from the same arguments and stays up across trials, so models load once.
Every call is one request over a Pipe and one final reply. `measure` also streams each prompt's
result, and the worker waits for the parent's answer before the next prompt: the parent's
`on_prompt` (storage writes, the pruner) never runs during a timed generation, and a pruned trial
stops at once, leaving the worker ready for the next call.

`run(function, ...)` calls a module-level function of a higher layer with the worker's PythonEngine
(the prediction's step costs, draft chains and blocks), streaming its one-line notes, so no llama.cpp
work of a search runs in the autotune process itself.

When the worker dies the call raises WorkerDied with the reason (the signal; for an abort, llama.cpp's
own last words: the worker's fd 2 goes to a file; for SIGILL, SIGSEGV, SIGBUS or SIGFPE, WorkerCrashed
with the crash line of autotune.llamacpp.crash) and the next call starts a fresh worker. A deadline
passed mid-prompt kills the worker, and so does Ctrl-C: the worker ignores SIGINT, SIGTERM and SIGHUP,
so a terminal's Ctrl-C reaches only the parent, which decides; and it dies with the parent.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pickle
import signal
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from autotune.engines.base import Engine, ProgressCallback
from autotune.engines.orphans import descendant_pids, die_with_parent
from autotune.errors import EngineError, TrialFailure, WorkerCrashed, WorkerDied
from autotune.interrupts import STOP_SIGNALS, deferred
from autotune.llamacpp.builds import llama_cpp_library_dir
from autotune.llamacpp.crash import crash_line, fatal_signal
from autotune.llamacpp.runtime import runtime_from_flags
from autotune.measure.ledger import charge
from autotune.measure.lossless import TieEvidence
from autotune.measure.measurement import Measurement
from autotune.measure.prompts import Prompt, PromptMix
from autotune.spec.config import SpecConfig
from autotune.spec.params import SpecParam
from autotune.spec.sampling import GREEDY, Sampling

STDERR_TAIL_LINES = 3  # of the dead worker's stderr, quoted in the failure reason
CLOSE_TIMEOUT_S = 10  # for the worker to free its models and exit before it is killed
#: what the worker was doing, by the call that was in flight when it died (for the crash line)
_DOING = {
    "prepare": "while loading the models",
    "load": "while loading the models",
    "measure": "while generating",
    "tie_evidence": "while replaying a divergence",
    "run": "while measuring in-process",
}


class WorkerEngine(Engine):
    """The python engine, run in a worker process that is restarted after it dies."""

    name = "python"

    def __init__(
        self,
        *,
        context_size: int = 4096,
        threads: int | None = None,
        base_flags: Sequence[str] = (),
        sampling: Sampling = GREEDY,
    ):
        # a flag the python engine cannot apply is bad input: refuse it here, before any process starts
        self.runtime = runtime_from_flags(base_flags, threads=threads, source="the search space's base_flags")
        self._engine_kwargs = {
            "context_size": context_size,
            "threads": threads,
            "base_flags": tuple(base_flags),
            "sampling": sampling,
        }
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Any = None
        self._stderr: tuple[int, Path] | None = None  # the worker's stderr file: our descriptor, its path
        self._answers: dict[tuple, Any] = {}
        self.last_worker_busy_s = 0.0  # the last call's time inside the worker, waits on the parent excluded

    @property
    def worker_pid(self) -> int | None:
        """The running worker's process id; None before the first call and once it died."""
        return None if self._process is None or self._process.exitcode is not None else self._process.pid

    @property
    def runnable_spec_types(self) -> frozenset[str]:
        return self._cached("runnable_spec_types")

    @property
    def build_info(self) -> str:
        return self._cached("build_info")

    def supports_param(self, param: SpecParam) -> bool:
        return self._cached("supports_param", param)

    def prepare(self, config: SpecConfig, mix: PromptMix, *, max_tokens: int) -> None:
        self._call("prepare", config, mix, max_tokens=max_tokens)

    def measure(
        self,
        config: SpecConfig,
        mix: PromptMix,
        *,
        max_tokens: int,
        on_prompt: ProgressCallback | None = None,
        deadline_s: float | None = None,
    ) -> Measurement:
        """The worker's measurement; its generated tokens are charged to this process's ledger (the
        worker's own warm-up request is not: it never leaves the worker)."""
        found = self._call("measure", config, mix, max_tokens=max_tokens, on_prompt=on_prompt, deadline_s=deadline_s)
        charge(tokens=sum(r.n_generated for r in found.results))
        return found

    def tie_evidence(
        self, target: Path, prompt: Prompt, generated: Sequence[int], token_a: int, token_b: int
    ) -> TieEvidence:
        return self._call("tie_evidence", target, prompt, list(generated), token_a, token_b)

    def run(
        self, function: Callable[..., Any], *args: Any, on_note: Callable[[str], None] | None = None, **kwargs: Any
    ) -> Any:
        """`function(engine, *args, note=..., **kwargs)` in the worker, `engine` being its PythonEngine;
        `function` must be importable by name (module level), its arguments and result picklable. Each
        line it passes to `note` reaches `on_note` as it is said."""
        return self._call("run", function, *args, on_note=on_note, **kwargs)

    def close(self) -> None:
        """Ask the worker to free its models and exit; kill it if it has not within CLOSE_TIMEOUT_S."""
        if self._process is None:
            return
        try:
            self._conn.send(("close", (), {}))
            self._process.join(CLOSE_TIMEOUT_S)
        except OSError:
            pass  # already gone
        finally:
            self._kill()

    def _cached(self, method: str, *args: Any) -> Any:
        key = (method, *args)
        if key not in self._answers:
            self._answers[key] = self._call(method, *args)
        return self._answers[key]

    def _call(
        self,
        method: str,
        *args: Any,
        on_prompt: ProgressCallback | None = None,
        on_note: Callable[[str], None] | None = None,
        deadline_s: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Send one request and wait for its reply, handing each streamed prompt result to `on_prompt`.

        Only an exception after which the worker is known to wait for the next request leaves it
        running (its own errors, a stopped measurement); on any other (Ctrl-C) it is killed."""
        self._ensure_worker()
        started = time.monotonic()
        prompt_index = 0
        in_step = False
        try:
            self._send((method, args, kwargs), method)
            while True:
                kind, *body = self._receive(deadline_s, started, prompt_index, method)
                if kind == "note":
                    if on_note is not None:
                        on_note(body[0])
                elif kind == "prompt":
                    prompt_index, result = body
                    try:
                        if on_prompt is not None:
                            on_prompt(prompt_index, result)
                    except Exception:  # pruned, or past the tuner's timeout: no next prompt
                        self._send("stop", method)
                        self._receive(deadline_s, started, prompt_index, method)  # the worker's "stopped"
                        in_step = True
                        raise
                    self._send("next", method)
                    prompt_index += 1
                elif kind == "done":
                    value, self.last_worker_busy_s = body
                    return value
                else:
                    in_step = True
                    raise _rebuilt(*body)
        except BaseException:
            if not in_step:
                self._kill()
            raise

    def _send(self, message: Any, method: str) -> None:
        try:
            self._conn.send(message)
        except OSError:  # the worker is gone
            raise self._death(method) from None

    def _receive(self, deadline_s: float | None, started: float, prompt_index: int, method: str) -> tuple:
        timeout = None if deadline_s is None else max(0.0, deadline_s - time.monotonic())
        if not self._conn.poll(timeout):
            self._kill()
            raise TrialFailure(f"timeout after {time.monotonic() - started:.1f} s at prompt {prompt_index + 1}")
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            raise self._death(method) from None

    def _ensure_worker(self) -> None:
        """Start a worker if none runs. One that died while idle (killed from outside) is replaced
        without a word: no call of ours was its cause."""
        if self._process is not None and self._process.exitcode is not None:
            self._kill()
        if self._process is None:
            context = multiprocessing.get_context("spawn")
            parent_end, child_end = context.Pipe()
            fd, stderr_path = tempfile.mkstemp(prefix="autotune-worker-", suffix=".stderr")
            process = context.Process(
                target=_serve,
                args=(child_end, self._engine_kwargs, stderr_path, os.getpid()),
                name="autotune python engine",
                daemon=True,
            )
            self._stderr = (fd, Path(stderr_path))
            try:
                process.start()
            except BaseException:
                parent_end.close()
                self._forget_stderr()
                raise
            finally:
                child_end.close()  # the parent must not hold it, or the worker's death would read as silence
            self._process, self._conn = process, parent_end

    def _death(self, method: str) -> WorkerDied:
        """Why the worker's pipe closed (it died) during `method`, with the last lines it wrote to
        stderr, or the crash line where llama.cpp died of a fatal signal; forgets the worker."""
        process = self._process
        process.join(CLOSE_TIMEOUT_S)
        code = process.exitcode
        tail = _last_lines(self._stderr[0], STDERR_TAIL_LINES)
        self._kill()
        fatal = fatal_signal(code)
        if fatal is not None:
            where = f"the in-process llama.cpp (llama-cpp-python, {llama_cpp_library_dir()})"
            return WorkerCrashed(crash_line(where, fatal, _DOING.get(method, f"in {method}")), tail)
        if code is None:
            head = "worker closed its pipe and stopped answering"
        elif code == -signal.SIGABRT:
            head = "llama.cpp aborted"
        elif code < 0:
            head = f"worker killed by {_signal_name(-code)}"
        else:
            head = f"worker exited with status {code}"
        return WorkerDied(f"{head}: {tail}" if tail else head)

    def _kill(self) -> None:
        """Kill the worker and whatever it started, and forget it (nothing is left running)."""
        with deferred():
            process, self._process = self._process, None
            if process is None:
                return
            if process.exitcode is None:  # not reaped yet, so its pid is still its own
                for pid in descendant_pids(process.pid):
                    _signal(pid, signal.SIGKILL)
            process.kill()
            process.join()
            process.close()
            self._conn.close()
            self._conn = None
            self._forget_stderr()

    def _forget_stderr(self) -> None:
        fd, path = self._stderr
        if os.fstat(fd).st_nlink:  # the worker removes it once open, unless it died before
            path.unlink()
        os.close(fd)


class _Stopped(Exception):
    """The parent asked the worker to stop measuring (the trial was pruned or timed out)."""


def _serve(conn, engine_kwargs: dict, stderr_path: str, parent_pid: int) -> None:
    """The worker: answer requests with a PythonEngine until "close" or until the parent is gone."""
    for signum in STOP_SIGNALS:  # a terminal's Ctrl-C, a hangup, a group's SIGTERM: the parent decides
        signal.signal(signum, signal.SIG_IGN)
    die_with_parent(parent_pid)  # killed with SIGKILL or by the OOM killer, the parent can decide nothing
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")  # an abort ends with its message, not a gdb session
    stderr = os.open(stderr_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(stderr, 2)  # C-level writes too: where llama.cpp's abort message lands
    os.close(stderr)
    os.unlink(stderr_path)  # the parent reads it through its own descriptor; nothing is left in /tmp
    from autotune.engines.python import PythonEngine

    engine = PythonEngine(**engine_kwargs)
    try:
        while True:
            method, args, kwargs = conn.recv()
            if method == "close":
                break
            started = time.perf_counter()
            waited = [0.0]
            try:
                if method == "measure":
                    value = engine.measure(*args, **kwargs, on_prompt=_streamer(conn, waited))
                elif method == "run":
                    function, *rest = args
                    value = function(engine, *rest, note=lambda line: conn.send(("note", line)), **kwargs)
                else:
                    attribute = getattr(engine, method)
                    value = attribute(*args, **kwargs) if callable(attribute) else attribute
                reply = ("done", value, time.perf_counter() - started - waited[0])
            except _Stopped:
                reply = ("stopped",)
            except Exception as exc:
                reply = ("error", *_portable(exc))
            conn.send(reply)
    except (EOFError, OSError):
        pass  # the parent is gone
    finally:
        engine.close()


def _streamer(conn, waited: list[float]) -> ProgressCallback:
    """on_prompt inside the worker: send the result, then wait for the parent's "next" or "stop"."""

    def on_prompt(index: int, result) -> None:
        conn.send(("prompt", index, result))
        asked = time.perf_counter()
        answer = conn.recv()
        waited[0] += time.perf_counter() - asked
        if answer == "stop":
            raise _Stopped

    return on_prompt


def _portable(exc: Exception) -> tuple:
    """What the parent needs to raise `exc` again: its type's place, its args, log tail, traceback."""
    args = exc.args
    try:
        pickle.dumps(args)
    except Exception:
        args = (str(exc),)
    return type(exc).__module__, type(exc).__qualname__, args, getattr(exc, "log_tail", ""), traceback.format_exc()


class _WorkerTraceback(Exception):
    """The worker-side traceback, chained as the cause of a re-raised exception (shown with AUTOTUNE_DEBUG)."""

    def __str__(self) -> str:
        return "\n" + self.args[0]


def _rebuilt(module: str, qualname: str, args: tuple, log_tail: str, worker_traceback: str) -> Exception:
    """The worker's exception as the same type with the same args. Built without calling __init__,
    whose parameters may differ from the args it stores (SpeculationInactiveError(spec_type))."""
    try:
        cls = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls, args = EngineError, (f"{qualname}: {', '.join(map(str, args))}",)
    exc = cls.__new__(cls, *args)
    exc.args = args
    if log_tail:
        exc.log_tail = log_tail
    exc.__cause__ = _WorkerTraceback(worker_traceback)
    return exc


def _last_lines(fd: int, n: int) -> str:
    """The last `n` non-empty lines of the file open as `fd` (of its last 16 KiB), joined with " | "."""
    size = os.fstat(fd).st_size
    text = os.pread(fd, 16384, max(0, size - 16384)).decode("utf-8", errors="replace")
    return " | ".join([line.strip() for line in text.splitlines() if line.strip()][-n:])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
