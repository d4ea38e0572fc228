"""The one error tree of autotune.

Library code raises these; only the CLI turns them into a one-line message and an exit code
(`exit_code`): 2 for bad input or usage, 1 for a failure at run time, 3 for work another process holds.
"""


class AutotuneError(Exception):
    """Base of every error autotune raises on purpose."""

    exit_code = 1


class UsageError(AutotuneError):
    """The user asked for something that cannot work as given (bad option, bad file)."""

    exit_code = 2


class UnknownModelError(UsageError):
    """No search-space file exists for the model name."""


class ModelFileError(UsageError):
    """A GGUF file is missing, unreadable, corrupt or not what the search space expects."""


class SearchSpaceError(UsageError):
    """A search-space file is malformed: the message names the file, key and problem."""


class HubSourceError(UsageError):
    """A repository, revision or file that a search space names on the Hugging Face Hub does not exist."""


class PromptFileError(UsageError):
    """A prompt file is malformed: the message names the file and line."""


class StorageError(UsageError):
    """The storage URL cannot be opened or written."""


class StudyNotFoundError(UsageError):
    """No study (or no finished trial) exists for what was asked."""


class LeaseHeld(AutotuneError):
    """Another process holds the lease of what was asked (`--no-wait`): the message says whose and since when."""

    exit_code = 3


class LeaseLost(AutotuneError):
    """This process's lease was taken over (it missed its heartbeats): what it measured is not stored."""


class ServerBinaryError(UsageError):
    """No usable llama-server binary: the message says how to get one."""


class EngineError(AutotuneError):
    """llama.cpp could not load a model or run a generation."""


class TrialFailure(AutotuneError):
    """One trial could not be measured; the study records it as FAIL with this reason and goes on."""


class ServerFailure(TrialFailure):
    """llama-server would not start, crashed, timed out or refused a request.

    `log_tail` holds the server's last log lines (newline-joined) so the tuner can store them.
    """

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


class WorkerDied(TrialFailure):
    """The python engine's worker process died during a call: a signal, a llama.cpp abort, the OOM killer.

    The tuner marks such a trial `worker_died`, so a configuration that crashes is never re-queued.
    """


class LlamaCppCrashed(TrialFailure):
    """llama.cpp died of a fatal signal (SIGILL, SIGSEGV, SIGBUS, SIGFPE): the message is the one line
    that names the signal, the binary or library, and the reinstall command (autotune.llamacpp.crash).
    Where it happens to a reference (the baseline) or a worker retried once, the search ends with it.
    `log_tail`: the dead process's last log lines, where it had a log."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


class WorkerCrashed(WorkerDied, LlamaCppCrashed):
    """The worker died of a fatal signal inside llama.cpp: a dead worker (the tuner never re-queues its
    configuration) whose message is the crash line."""


class SpeculationInactiveError(TrialFailure):
    """A speculative configuration drafted nothing over the whole prompt mix."""

    def __init__(self, spec_type: str):
        super().__init__(f"speculation inactive: {spec_type} drafted no token on any prompt")
