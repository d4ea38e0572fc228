"""One llama-server subprocess: launch, wait until ready, talk JSON over HTTP, stop on every exit path.

The server runs in its own process group (so Ctrl-C in a terminal reaches only us, and we stop the
whole group ourselves), dies with us even when we are killed (autotune.engines.orphans), and logs
to a temporary file whose last lines go onto every failure. A stop signal waits while the server is
being started or stopped, so its process is never lost between Popen and our handle on it.
Only the standard library speaks HTTP here: llama-server's API is a handful of JSON endpoints.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Sequence

from autotune.engines.orphans import ServerRecord, die_with_parent, forget_server, record_server
from autotune.errors import LlamaCppCrashed, ServerFailure
from autotune.interrupts import deferred
from autotune.llamacpp.crash import crash_line, fatal_signal
from autotune.measure.ledger import charge

LOG_TAIL_LINES = 30
STOP_TIMEOUT_S = 10.0
BIND_ATTEMPTS = 3
_LOG_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")  # "0.00.004.545 E " timestamp + level
_ERROR_WORDS = ("error", "failed", "invalid", "cannot", "unable", "abort", "out of memory")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env() -> dict[str, str]:
    """Our environment without LLAMA_ARG_* variables: llama-server reads them as flags, and what we
    measure must be exactly the printed argv."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}


class ServerProcess:
    """A running llama-server on 127.0.0.1; use as a context manager.

    `argv` is the full command line without `--host`/`--port`, which are added here (a port can be
    taken between choosing and binding it, so a bind failure is retried on a new port).
    """

    def __init__(self, argv: Sequence[str], *, startup_timeout_s: float, request_timeout_s: float):
        self.base_argv = list(argv)
        self.argv: list[str] = []
        self.startup_timeout_s = startup_timeout_s
        self.request_timeout_s = request_timeout_s
        self.port = 0
        self._proc: subprocess.Popen | None = None
        self._record: ServerRecord | None = None
        self._log_dir = tempfile.TemporaryDirectory(prefix="autotune-server-")
        self.log_path = Path(self._log_dir.name) / "llama-server.log"

    def __enter__(self) -> "ServerProcess":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Launch and wait until `/health` answers 200; ServerFailure if it exits or times out."""
        for attempt in range(BIND_ATTEMPTS):
            self.port = free_port()
            self.argv = self.base_argv + ["--host", "127.0.0.1", "--port", str(self.port)]
            parent = os.getpid()
            with deferred(), open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=server_env(),
                    start_new_session=True,
                    preexec_fn=functools.partial(die_with_parent, parent),
                )
                self._record = record_server(self._proc.pid, self.argv)
            charge(server_starts=1)
            try:
                self._wait_ready()
                return
            except ServerFailure:
                bind_failed = "couldn't bind" in self.log_tail() and self._proc.poll() is not None
                if not bind_failed or attempt == BIND_ATTEMPTS - 1:
                    raise
                self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        delay = 0.02
        while True:
            code = self._proc.poll()
            if code is not None:
                raise self.crash(code, f"while loading {self.model_name}") or self.failure(
                    f"llama-server exited with code {code} before it was ready"
                )
            try:
                status, _ = self._http("GET", "/health", None, timeout=2.0)
                if status == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise self.failure(f"llama-server was not ready within {self.startup_timeout_s:g} s")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def stop(self) -> None:
        """SIGTERM to the process group, wait, then SIGKILL; safe to call twice and during Ctrl-C."""
        with deferred():
            proc, self._proc = self._proc, None
            if proc is None:
                return
            try:
                if proc.poll() is None:
                    _signal_group(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=STOP_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        pass
            finally:
                _signal_group(proc.pid, signal.SIGKILL)  # also ends anything the server left in its group
                proc.wait()
                if self._record is not None:
                    forget_server(self._record)
                    self._record = None

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self._log_dir.cleanup()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    # -- HTTP ------------------------------------------------------------------------------------

    def post(self, path: str, body: dict, *, what: str) -> dict:
        """POST JSON and return the JSON answer; ServerFailure (naming `what`) on any failure."""
        try:
            status, data = self._http("POST", path, body, timeout=self.request_timeout_s)
        except socket.timeout as exc:
            raise self.failure(f"llama-server gave no answer to {what} within {self.request_timeout_s:g} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            state = self._state()
            raise self.crash(self._proc.returncode if self._proc else None, f"during {what}") or self.failure(
                f"llama-server {state} during {what} ({exc.__class__.__name__})"
            ) from exc
        if status != 200:
            raise self.failure(f"llama-server answered {what} with HTTP {status}: {_error_message(data)}")
        return data

    def get_text(self, path: str) -> str | None:
        """GET a text endpoint (`/metrics`); None when the server does not offer it."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.request_timeout_s)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            text = response.read().decode("utf-8", errors="replace")
            return text if response.status == 200 else None
        except (OSError, http.client.HTTPException) as exc:
            raise self.failure(f"llama-server {self._state()} while reading {path}") from exc
        finally:
            conn.close()

    def _http(self, method: str, path: str, body: dict | None, *, timeout: float) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            data = {"error": {"message": raw[:200].decode("utf-8", errors="replace")}}
        return response.status, data

    # -- diagnostics -----------------------------------------------------------------------------

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            with open(self.log_path, "r", encoding="utf-8", errors="replace") as log:
                return "".join(deque(log, maxlen=lines)).rstrip("\n")
        except OSError:
            return ""

    def error_lines(self, limit: int = 20) -> list[str]:
        """The log's first `limit` error lines: why speculation silently stayed off, for instance
        ("the target and draft vocabs are not compatible"), which scrolls out of the tail."""
        try:
            with open(self.log_path, "r", encoding="utf-8", errors="replace") as log:
                errors = (_LOG_PREFIX.sub("", line).strip() for line in log if _is_error(line))
                return [line for line, _ in zip(errors, range(limit))]
        except OSError:
            return []

    @property
    def model_name(self) -> str:
        argv = self.base_argv
        path = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in ("-m", "--model")), "the model")
        return Path(path).name

    def crash(self, returncode: int | None, when: str) -> LlamaCppCrashed | None:
        """The one-line error of a server killed by a fatal signal (autotune.llamacpp.crash); None otherwise."""
        signum = fatal_signal(returncode)
        if signum is None:
            return None
        return LlamaCppCrashed(crash_line(f"llama-server ({self.base_argv[0]})", signum, when), self.log_tail())

    def failure(self, message: str) -> ServerFailure:
        """A ServerFailure whose message ends with the most telling log line."""
        tail = self.log_tail()
        reason = _telling_line(tail)
        return ServerFailure(f"{message}: {reason}" if reason else message, tail)

    def _state(self) -> str:
        if self._proc is None:
            return "was stopped"
        try:
            code = self._proc.wait(timeout=1.0)  # a crash closes the socket a moment before the exit
        except subprocess.TimeoutExpired:
            return "failed"
        return f"exited with code {code}"


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _telling_line(tail: str) -> str:
    """The log line that best says why the server failed, without llama.cpp's timestamp prefix.

    llama.cpp logs the cause first and its consequences after ("... tensor 'x' not found", then
    "exiting due to model loading error"), so the first error wins; an out-of-memory line wins
    over everything, and common_fit_params' pre-check (which repeats a load error) loses.
    """
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    errors = [_LOG_PREFIX.sub("", line) for line in lines if _is_error(line)]
    ranked = [e for e in errors if "out of memory" in e.lower()] + [e for e in errors if "common_fit_params" not in e]
    candidates = ranked or errors or [_LOG_PREFIX.sub("", line) for line in lines[-1:]]
    return candidates[0][:300] if candidates else ""


def _is_error(line: str) -> bool:
    match = _LOG_PREFIX.match(line)
    if match:
        return match.group(0).rstrip().endswith("E")
    return any(word in line.lower() for word in _ERROR_WORDS)


def _error_message(data: dict) -> str:
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(error or data)[:200]
