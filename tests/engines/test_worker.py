"""The python engine's worker process: a crash, a hang or Ctrl-C costs one trial, never the study.
Real llama.cpp on the tiny GGUF fixtures, real signals, real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines import create_engine
from autotune.engines.orphans import descendant_pids
from autotune.engines.worker import WorkerEngine
from autotune.errors import ModelFileError, TrialFailure, UsageError, WorkerDied
from autotune.hardware import hardware_key
from autotune.measure.prompts import Prompt, PromptMix
from autotune.search.measured._references import requeue_stale_trial
from autotune.spec.config import SpecConfig
from autotune.testing.database import studies_in
from autotune.testing.processes import start_autotune, wait_for_exits, watch_exits

# ~250 ms a prompt on one thread here: long enough for a signal or a deadline to land mid-prompt
LONG_MIX = PromptMix(
    "test", tuple(Prompt(f"p{i}", "qa", "The quick brown fox jumps over the lazy dog.") for i in range(8))
)
LONG_TOKENS = 600


@pytest.fixture
def no_core_dumps():
    """A worker killed by SIGSEGV would otherwise leave a core file where the tests run."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    yield
    resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


@pytest.fixture
def engine(no_core_dumps):
    with WorkerEngine(context_size=1024, threads=1) as engine:
        yield engine


@pytest.fixture
def target(tiny_dir) -> Path:
    return tiny_dir / "tiny-target.gguf"


def process_state(pid: int) -> str:
    """`pid`'s state letter (R running, S sleeping: a worker waiting for its next call sleeps)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def alive(pid: int) -> bool:
    return process_state(pid) not in ("", "Z")


def measure_killed_by(engine, target, signum: int) -> WorkerDied:
    """Measure LONG_MIX and send `signum` to the worker while it generates the second prompt."""

    def on_prompt(index, result):
        if index == 0:
            threading.Timer(0.05, os.kill, (engine.worker_pid, signum)).start()

    with pytest.raises(WorkerDied) as failure:
        engine.measure(SpecConfig(target), LONG_MIX, max_tokens=LONG_TOKENS, on_prompt=on_prompt)
    return failure.value


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSEGV], ids=["SIGKILL", "SIGSEGV"])
def test_a_worker_killed_mid_measure_fails_the_measurement_and_the_next_call_gets_a_fresh_worker(
    engine, target, signum
):
    engine.prepare(SpecConfig(target), LONG_MIX, max_tokens=16)
    first = engine.worker_pid
    failure = measure_killed_by(engine, target, signum)
    if signum == signal.SIGKILL:  # from outside: no crash of llama.cpp's to speak of
        assert str(failure) == "worker killed by SIGKILL"
    else:  # a fatal signal is said as llama.cpp's crash: the signal, the library, the fix
        assert str(failure).startswith("the in-process llama.cpp (llama-cpp-python, ")
        assert "died of SIGSEGV (segmentation fault) while generating" in str(failure)
        assert str(failure).endswith("python -m autotune.install --rebuild")
    assert isinstance(failure, TrialFailure)
    assert engine.worker_pid is None and not alive(first)
    measurement = engine.measure(SpecConfig(target), LONG_MIX, max_tokens=8)
    assert len(measurement.results) == len(LONG_MIX.prompts)
    assert engine.worker_pid not in (None, first)


def _fail_a_ggml_assert(target: str) -> None:
    """Sample a logits row llama.cpp never computed: `GGML_ASSERT(logits != nullptr)` aborts."""
    import llama_cpp

    from autotune.llamacpp.bindings import Context, LoadedModel
    from autotune.llamacpp.runtime import Runtime

    context = Context(LoadedModel(Path(target)), n_ctx=64, runtime=Runtime(threads=1))
    context.decode([1, 2, 3], 0)
    llama_cpp.llama_sampler_sample(llama_cpp.llama_sampler_init_greedy(), context.ptr, 7)


class GgmlAssert:
    """A request argument that, unpickled in the worker, makes llama.cpp fail an assertion there."""

    def __init__(self, target: Path):
        self.target = str(target)

    def __reduce__(self):
        return _fail_a_ggml_assert, (self.target,)


def test_an_abort_in_llama_cpp_names_its_message_from_the_worker_stderr(engine, target):
    with pytest.raises(WorkerDied) as failure:
        engine.measure(SpecConfig(target), GgmlAssert(target), max_tokens=8)
    reason = str(failure.value)
    assert reason.startswith("llama.cpp aborted: ")
    assert "GGML_ASSERT(logits != nullptr) failed" in reason
    assert engine.measure(SpecConfig(target), LONG_MIX, max_tokens=8).results


def test_a_deadline_that_passes_mid_prompt_kills_the_worker(engine, target):
    """The deadline has passed by the time the first answer is awaited: the worker, busy with the first
    prompt, is killed there on any machine, fast or loaded (no wall-clock race with the mix)."""
    engine.prepare(SpecConfig(target), LONG_MIX, max_tokens=16)
    doomed = engine.worker_pid
    finished = []
    with pytest.raises(TrialFailure, match=r"^timeout after \d+\.\d s at prompt 1$") as failure:
        engine.measure(
            SpecConfig(target),
            LONG_MIX,
            max_tokens=LONG_TOKENS,
            deadline_s=time.monotonic(),
            on_prompt=lambda index, result: finished.append(index),
        )
    assert not isinstance(failure.value, WorkerDied)  # a hang we stopped, not a crash
    assert finished == []  # cut inside the first prompt
    assert not alive(doomed)
    assert engine.measure(SpecConfig(target), LONG_MIX, max_tokens=8).results


def test_a_pruned_measurement_stops_at_once_and_the_same_worker_measures_on(engine, target):
    seen = []

    def prune_at_third(index, result):
        seen.append(index)
        if index == 2:
            raise optuna.TrialPruned("slower")

    engine.prepare(SpecConfig(target), LONG_MIX, max_tokens=16)
    worker = engine.worker_pid
    with pytest.raises(optuna.TrialPruned):
        engine.measure(SpecConfig(target), LONG_MIX, max_tokens=32, on_prompt=prune_at_third)
    assert seen == [0, 1, 2]
    assert len(engine.measure(SpecConfig(target), LONG_MIX, max_tokens=8).results) == len(LONG_MIX.prompts)
    assert engine.worker_pid == worker


def test_errors_in_the_worker_come_back_with_their_type_and_message(engine, target, tmp_path):
    with pytest.raises(ModelFileError, match=f"^model file not found: {tmp_path / 'gone.gguf'}$"):
        engine.prepare(SpecConfig(tmp_path / "gone.gguf"), LONG_MIX, max_tokens=8)
    with pytest.raises(UsageError, match="above the search space's context_size 1024"):
        engine.prepare(SpecConfig(target), LONG_MIX, max_tokens=1020)
    worker = engine.worker_pid
    assert engine.measure(SpecConfig(target), LONG_MIX, max_tokens=8).results
    assert engine.worker_pid == worker


def test_a_refused_base_flag_raises_before_any_process_starts():
    with pytest.raises(UsageError, match="cannot apply '--mlock'"):
        create_engine("python", context_size=512, base_flags=("--mlock",))
    assert not [pid for pid in descendant_pids(os.getpid()) if "spawn_main" in cmdline(pid)]


def test_close_ends_the_worker(target):
    engine = create_engine("python", context_size=512, threads=1)
    assert isinstance(engine, WorkerEngine) and engine.worker_pid is None  # started on first use
    assert "none" in engine.runnable_spec_types
    worker = engine.worker_pid
    engine.close()
    assert engine.worker_pid is None and not alive(worker)


#: What measuring prints (a pace, a trial, a race): a bad input must end before any of it. (The mix's note,
#: "measuring the bundled continuation mix", says what will be measured, not that anything was.)
MEASURING = ("measuring the baseline", "calibrat", "race round", "[1/", "tok/s")


@pytest.mark.parametrize(
    "command, extra, space_line, needle",
    [
        # found by the worker's prepare; the default strategy measures the baseline's pace first: not before this
        *[
            (command, ["--max-tokens", "400"], "", "above the search space's context_size 512")
            for command in ("search", "search --strategy measure")
        ],
        # the python engine's refusal, before any worker starts (the default strategy measures its pace on llama-server)
        ("search --strategy measure", [], 'base_flags = ["--mlock"]', "cannot apply '--mlock'"),
    ],
    ids=["max-tokens-default", "max-tokens-measure", "mlock-measure"],
)
def test_bad_input_is_a_one_line_usage_error_before_any_study(
    tiny_space, models_dir, autotune_home, command, extra, space_line, needle
):
    tiny_space.write_text(tiny_space.read_text().replace("context_size = 512", f"context_size = 512\n{space_line}"))
    result = CliRunner().invoke(
        cli, [*command.split(), "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir), *extra]
    )
    assert result.exit_code == 2, result.output
    *notes, line = result.output.strip().splitlines()  # notes (the base model's mix) may come first
    assert line.startswith("autotune: error: ") and needle in line
    assert all(note.startswith("autotune: ") and "error" not in note for note in notes)
    assert not [word for word in MEASURING if word.lower() in result.output.lower()], result.output
    assert studies_in(autotune_home / "autotune.db") == 0
    assert not workers_of(os.getpid())


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def workers_of(pid: int) -> list[int]:
    """The python engine workers among `pid`'s descendants (not multiprocessing's resource tracker)."""
    return [child for child in descendant_pids(pid) if "spawn_main" in cmdline(child)]


def load(home: Path) -> optuna.Study:
    return optuna.load_study(study_name=f"tiny@{hardware_key()}:python", storage=f"sqlite:///{home / 'autotune.db'}")


def test_a_study_whose_worker_is_killed_finishes_with_every_trial_accounted_for(tiny_space, models_dir, autotune_home):
    killed, fresh = [], []

    def kill_inside_a_searched_trials_measurement() -> None:
        wait_for(
            lambda: measuring_trial(autotune_home, 2) and workers_of(os.getpid()), "a searched trial's measurement", 120
        )
        (worker,) = workers_of(os.getpid())
        wait_for(lambda: process_state(worker) == "R", "the worker decoding")  # inside a call, not idle between two
        os.kill(worker, signal.SIGKILL)
        killed.append(worker)
        wait_for(lambda: [pid for pid in workers_of(os.getpid()) if pid != worker], "a fresh worker", 120)
        fresh.extend(pid for pid in workers_of(os.getpid()) if pid != worker)

    killer = threading.Thread(target=kill_inside_a_searched_trials_measurement)
    killer.start()
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            "--model",
            "tiny",
            "--space",
            str(tiny_space),
            "--models-dir",
            str(models_dir),
            "--trials",
            "6",
            "--max-tokens",
            "120",
            "--no-pruning",
            "--baseline-every",
            "0",
            "--no-confirm",
        ],
    )
    killer.join()
    assert result.exit_code == 0, result.output
    assert killed and not alive(killed[0])
    assert fresh, "no fresh worker started after the kill"
    trials = load(autotune_home).trials
    assert len(trials) == 7  # 6 counted and --spec-default
    for trial in trials:
        assert trial.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
        if trial.state == optuna.trial.TrialState.FAIL:
            assert trial.user_attrs["fail_reason"]
    (died,) = [t for t in trials if t.user_attrs.get("worker_died")]
    assert died.number >= 2 and died.state == optuna.trial.TrialState.FAIL
    assert died.user_attrs["fail_reason"] == "worker killed by SIGKILL"
    assert [t.number for t in trials if t.state == optuna.trial.TrialState.FAIL] == [died.number]  # the rest measured
    assert not workers_of(os.getpid())


def measuring_trial(home: Path, number: int) -> bool:
    """Whether trial `number` or a later one of the study in `home` is being measured (`trial_measured`)."""
    return trial_measured(home, number) is not None


def trial_measured(home: Path, number: int = 0) -> int | None:
    """The trial, `number` or a later one, of the study in `home` being measured: RUNNING, with everything the
    tuner stores before it measures (its model files' revisions come last); None when none is. Read-only SQL,
    so the test never creates the tables autotune is about to create."""
    database = home / "autotune.db"
    if not database.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as db:
            row = db.execute(
                "SELECT min(t.number) FROM trials t JOIN trial_user_attributes a ON a.trial_id = t.trial_id "
                "WHERE t.number >= ? AND t.state = 'RUNNING' AND a.key = 'model_revisions'",
                (number,),
            ).fetchone()
    except sqlite3.OperationalError:
        return None  # the tables are not there yet
    return None if row is None else row[0]


def wait_for(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s:g} s"
        time.sleep(0.05)


def interrupted_search(
    tiny_space, models_dir, autotune_home, *, sigint: str, signals: list[int]
) -> tuple[int, str, dict[int, int | None], list[int]]:
    """Start a 5-trial search; once a trial after the baseline is being measured and its worker decodes,
    send the first of `signals` to its process group; each next one once autotune, still running, has
    gone on to measure a later trial (the one before changed nothing). Return its exit code, its stderr,
    the processes it had started (watched: autotune.testing.processes.watch_exits) and the trial each
    signal was sent during."""
    argv = [
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--trials",
        "5",
        "--max-tokens",
        "200",
        "--per-category",
        "3",
        "--no-pruning",
        "--no-confirm",
    ]
    env = {**os.environ, "AUTOTUNE_HOME": str(autotune_home), "PYTHONUNBUFFERED": "1"}
    proc = start_autotune(argv, env=env, sigint=sigint, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    left: dict[int, int | None] = {}
    during: list[int] = []

    def decoding_in_a_trial(after: int) -> bool:
        """Whether trial `after` or a later one is being measured and its worker decodes (inside a call,
        not idle between two); if so, that trial's number is the next of `during`."""
        number, workers = trial_measured(autotune_home, after), workers_of(proc.pid)
        if number is None or len(workers) != 1 or process_state(workers[0]) != "R":
            return False
        during.append(number)
        return True

    try:
        for sent, signum in enumerate(signals):
            after = during[-1] + 1 if during else 1  # after the baseline; then after the trial signalled before
            wait_for(
                lambda after=after: decoding_in_a_trial(after) or proc.poll() is not None,
                f"trial {after} or a later one measured, its worker decoding",
            )
            assert proc.poll() is None, (
                f"autotune stopped on {signal.Signals(signals[sent - 1]).name}"
                if sent
                else "autotune ended before a trial after the baseline"
            )
            left.update(watch_exits(pid for pid in descendant_pids(proc.pid) if pid not in left))
            os.killpg(proc.pid, signum)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, proc.stderr.read(), left, during


def assert_nothing_left_and_one_trial_interrupted(left: dict[int, int | None], home: Path, during: int) -> None:
    """Every process autotune started has ended (waited for, not timed), and the trial measured when the
    signal that stopped it came, or a later one, is the one interrupted: nothing started after it."""
    assert wait_for_exits(left) == []
    trials = load(home).trials
    assert optuna.trial.TrialState.RUNNING not in [t.state for t in trials]
    (interrupted,) = [t for t in trials if t.user_attrs.get("interrupted")]
    assert interrupted.state == optuna.trial.TrialState.FAIL
    assert interrupted.number == trials[-1].number >= during >= 1


@pytest.mark.slow
def test_after_the_baseline_killed_the_worker_no_trial_is_ranked_on_raw_tok_s(tiny_space, models_dir, autotune_home):
    """With no baseline, a trial's tok/s (~thousands here) would outrank every speedup (~1): such trials
    fail with the reason instead, and `best` has nothing to print."""
    killed = []

    def kill_during_the_baseline() -> None:
        wait_for(lambda: measuring_trial(autotune_home, 0) and workers_of(os.getpid()), "the baseline's measurement")
        time.sleep(0.1)
        killed.extend(workers_of(os.getpid()))
        os.kill(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_during_the_baseline)
    killer.start()
    args = ["--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir)]
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            *args,
            "--trials",
            "4",
            "--max-tokens",
            "300",
            "--no-pruning",
            "--baseline-every",
            "0",
            "--no-confirm",
        ],
    )
    killer.join()
    assert killed
    trials = load(autotune_home).trials
    baseline = trials[0]
    assert baseline.user_attrs["role"] == "baseline" and baseline.user_attrs.get("worker_died"), result.output
    later = [t for t in trials[1:] if "figures" in t.user_attrs]  # measured after the baseline died
    assert later, result.output
    for trial in later:
        assert trial.state == optuna.trial.TrialState.FAIL
        assert trial.user_attrs["fail_reason"].startswith("no baseline of tiny-target.gguf completed")
    assert result.exit_code == 1
    assert "every trial failed" in result.output
    best = CliRunner().invoke(cli, ["best", "--model", "tiny"])
    assert best.exit_code != 0 and "no completed trial" in best.output


def test_ctrl_c_kills_the_worker_and_leaves_no_process_behind(tiny_space, models_dir, autotune_home):
    code, stderr, left, (during,) = interrupted_search(
        tiny_space, models_dir, autotune_home, sigint="default", signals=[signal.SIGINT]
    )
    assert code == 130, stderr
    assert "autotune: interrupted by SIGINT" in stderr
    assert "Traceback" not in stderr
    assert_nothing_left_and_one_trial_interrupted(left, autotune_home, during)


def test_started_with_sigint_ignored_it_stays_deaf_to_ctrl_c_and_sigterm_stops_it(
    tiny_space, models_dir, autotune_home
):
    """A background job of a shell script has SIGINT ignored; autotune keeps that, as the README says."""
    code, stderr, left, (ignored, stopped) = interrupted_search(
        tiny_space, models_dir, autotune_home, sigint="ignore", signals=[signal.SIGINT, signal.SIGTERM]
    )
    assert code == 128 + signal.SIGTERM, stderr
    assert "autotune: interrupted by SIGTERM" in stderr and "interrupted by SIGINT" not in stderr
    assert_nothing_left_and_one_trial_interrupted(left, autotune_home, stopped)
    deaf = load(autotune_home).trials[ignored]  # measured through Ctrl-C, to its end
    assert deaf.state == optuna.trial.TrialState.COMPLETE and not deaf.user_attrs.get("interrupted")


def _stale(study: optuna.Study, params: dict, **attrs) -> optuna.trial.FrozenTrial:
    distributions = {name: optuna.distributions.CategoricalDistribution([value]) for name, value in params.items()}
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, params=params, distributions=distributions, user_attrs=attrs
        )
    )
    return study.trials[-1]


def waiting(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(states=(optuna.trial.TrialState.WAITING,))


def test_the_heartbeat_requeues_a_dead_trial_once_and_never_a_configuration_that_killed_a_worker():
    study = optuna.create_study()
    crashing = {"spec_type": "ngram-simple", "ngram_simple_size_n": 2}
    _stale(study, crashing, worker_died=True, fail_reason="worker killed by SIGKILL")
    requeue_stale_trial(study, _stale(study, crashing))
    assert not waiting(study)

    innocent = {"spec_type": "ngram-simple", "ngram_simple_size_n": 3}
    requeue_stale_trial(study, _stale(study, innocent))
    (requeued,) = waiting(study)
    assert requeued.system_attrs["fixed_params"] == innocent  # what it will measure
    requeue_stale_trial(study, _stale(study, innocent, requeued_from=requeued.user_attrs["requeued_from"]))
    assert len(waiting(study)) == 1  # it died twice: recorded as FAIL, not queued a third time


def test_a_baseline_that_killed_a_worker_blocks_only_its_own_target():
    study = optuna.create_study()
    _stale(study, {}, role="baseline", target="/m/a.gguf", worker_died=True)
    requeue_stale_trial(study, _stale(study, {}, role="baseline", target="/m/a.gguf"))
    requeue_stale_trial(study, _stale(study, {}, role="baseline", target="/m/b.gguf"))
    assert [t.user_attrs["target"] for t in waiting(study)] == ["/m/b.gguf"]
