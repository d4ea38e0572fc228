"""Presets in real SQLite files, the persistent hash cache, and the three export formats (the sh
launcher is really executed, with a stand-in nvidia-smi and a stand-in llama-server on PATH, and computes
the same hardware key as autotune.hardware)."""

from __future__ import annotations

import configparser
import dataclasses
import hashlib
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import optuna
import pytest

from autotune import hardware
from autotune.errors import StorageError, UsageError
from autotune.hardware import _cpu_name
from autotune.presets.export import entry_names, export_presets
from storage import open_storage
from storage.presets import Preset, PresetStore
from storage.schema import SCHEMA_VERSION

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

H200 = "NVIDIA H200 140GiB"  # what hardware_key() gives for nvidia-smi's "NVIDIA H200, 143771" (MiB)
A100 = "NVIDIA A100-SXM4-80GB 80GiB"


def make_preset(model: str = "gemma3-270m", hardware: str = H200, **changes) -> Preset:
    preset = Preset(
        model=model,
        hardware=hardware,
        argv=("llama-server", "-m", "/models/my model.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "6"),
        tok_s=412.5,
        baseline_tok_s=250.0,
        speedup=1.65,
        ci95_low=401.25,
        ci95_high=423.75,
        p_value=0.0004,
        engine="server",
        llama_cpp_build="b6000 (abc123)",
        file_hashes={"my model.gguf": "ab" * 32},
        params={"spec_type": "draft-simple", "draft_n_max": 6, "draft_p_min": 0.5},
        study_name=f"{model}@{hardware}:python",
        created_at=datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc),
    )
    return replace(preset, **changes)


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'autotune.db'}"


@pytest.fixture
def store(url):
    with PresetStore(url) as opened:
        yield opened


# the store


def test_save_get_replace_list(store):
    first = make_preset()
    store.save(first)
    assert store.get("gemma3-270m", H200) == first
    assert store.get("gemma3-270m", A100) is None

    better = make_preset(tok_s=500.0, speedup=2.0, ci95_low=None, ci95_high=None, p_value=None)
    store.save(better)
    assert store.get("gemma3-270m", H200) == better

    others = [make_preset("qwen3-8b", "CPU Intel Xeon"), make_preset("gemma3-270m", "CPU AMD EPYC")]
    for preset in others:
        store.save(preset)
    assert [(p.model, p.hardware) for p in store.list()] == [
        ("gemma3-270m", "CPU AMD EPYC"),
        ("gemma3-270m", H200),
        ("qwen3-8b", "CPU Intel Xeon"),
    ]


def test_presets_survive_reopening_and_store_the_command(url):
    with PresetStore(url) as store:
        store.save(make_preset())
    with PresetStore(url) as store:
        (preset,) = store.list()
    assert preset.created_at.tzinfo == timezone.utc
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        (command,) = connection.execute("SELECT command FROM autotune_presets").fetchone()
    assert command == "llama-server -m '/models/my model.gguf' --spec-type draft-simple --spec-draft-n-max 6"
    assert command == preset.command


def test_shares_the_database_with_optuna(url):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(study_name=f"gemma3-270m@{H200}:python", storage=open_storage(url))
    with PresetStore(url) as store:
        store.save(make_preset())
    assert optuna.load_study(study_name=f"gemma3-270m@{H200}:python", storage=open_storage(url))
    with PresetStore(url) as store:
        assert len(store.list()) == 1


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (
            SCHEMA_VERSION + 1,
            f"database schema v{SCHEMA_VERSION + 1} is newer than this autotune (v{SCHEMA_VERSION}): upgrade autotune",
        ),
        (0, f"database schema v0 is older than this autotune (v{SCHEMA_VERSION}) and has no migration"),
    ],
)
def test_schema_version_mismatch_names_the_fix(url, version, message):
    PresetStore(url).close()
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        connection.execute("UPDATE autotune_schema_version SET version = ?", (version,))
    with pytest.raises(StorageError) as raised:
        PresetStore(url)
    assert str(raised.value).startswith(message)


def test_a_v1_database_is_migrated_and_keeps_its_presets(url):
    with PresetStore(url) as store:
        store.save(make_preset())
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:  # as autotune v1 left it
        connection.execute("ALTER TABLE autotune_presets DROP COLUMN file_revisions")
        connection.execute("UPDATE autotune_schema_version SET version = 1")
    with PresetStore(url) as store:
        (preset,) = store.list()
        assert preset.file_revisions == {} and preset.argv == make_preset().argv
        store.save(replace(preset, file_revisions={"d.gguf": {"repo": "org/r", "revision": "c" * 40}}))
        assert store.list()[0].file_revisions == {"d.gguf": {"repo": "org/r", "revision": "c" * 40}}
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        assert connection.execute("SELECT version FROM autotune_schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_database_errors_become_storage_errors(url):
    with PresetStore(url) as store:
        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            connection.execute("DROP TABLE autotune_presets")
        with pytest.raises(StorageError, match="no such table: autotune_presets"):
            store.list()


def test_bad_url_is_a_storage_error():
    with pytest.raises(StorageError, match="not a valid SQLAlchemy URL"):
        PresetStore("not a url")


def test_hash_cache_hits_until_size_or_mtime_changes(store, tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"first contents")
    first = hashlib.sha256(b"first contents").hexdigest()
    assert store.cached_sha256(model) == first
    stat = model.stat()

    # Same size, same mtime: the cache answers, even though the bytes changed behind its back.
    model.write_bytes(b"other contents")
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert store.cached_sha256(model) == first

    # Touching the file moves its mtime: the hash is computed again.
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert store.cached_sha256(model) == hashlib.sha256(b"other contents").hexdigest()
    assert store.cached_sha256(str(model)) == hashlib.sha256(b"other contents").hexdigest()


# exports


#: make_preset()'s fields as an export writes them, written out by hand (not by preset_record).
EXPORTED = {
    "model": "gemma3-270m",
    "hardware": H200,
    "command": "llama-server -m '/models/my model.gguf' --spec-type draft-simple --spec-draft-n-max 6",
    "argv": ["llama-server", "-m", "/models/my model.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "6"],
    "tok_s": 412.5,
    "baseline_tok_s": 250.0,
    "speedup": 1.65,
    "ci95_low": 401.25,
    "ci95_high": 423.75,
    "p_value": 0.0004,
    "engine": "server",
    "llama_cpp_build": "b6000 (abc123)",
    "file_hashes": {"my model.gguf": "ab" * 32},
    "params": {"spec_type": "draft-simple", "draft_n_max": 6, "draft_p_min": 0.5},
    "study_name": f"gemma3-270m@{H200}:python",
    "concurrency": 1,
    "created_at": "2025-01-02T03:04:05.678901+00:00",
    "file_revisions": {},
    "reason": None,
}


def test_json_export_parses_back(store):
    presets = [make_preset(), make_preset("qwen3-8b", "CPU Intel Xeon", p_value=None)]
    rows = json.loads(export_presets(presets, "json"))
    assert rows == [
        EXPORTED,
        {
            **EXPORTED,
            "model": "qwen3-8b",
            "hardware": "CPU Intel Xeon",
            "p_value": None,
            "study_name": "qwen3-8b@CPU Intel Xeon:python",
        },
    ]


def test_toml_export_parses_back_with_awkward_strings():
    awkward = make_preset(
        hardware='GPU "quoted" \\ back\tslash\nnewline \x7f é',
        argv=("llama-server", "-m", "C:\\models\\a'b.gguf"),
        file_hashes={'a.b "c".gguf': "cd" * 32},
        params={"spec_type": "ngram-simple", "on": True, "ratio": float("inf"), "tiny": 1e-7},
        p_value=None,
    )
    presets = [make_preset(), awkward]
    tables = tomllib.loads(export_presets(presets, "toml"))["preset"]
    created_at = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)  # TOML has datetimes; no null
    first = {k: v for k, v in EXPORTED.items() if v is not None} | {"created_at": created_at}
    assert tables == [
        first,
        {k: v for k, v in first.items() if k != "p_value"}
        | {
            "hardware": 'GPU "quoted" \\ back\tslash\nnewline \x7f é',
            "command": "llama-server -m 'C:\\models\\a'\"'\"'b.gguf'",
            "argv": ["llama-server", "-m", "C:\\models\\a'b.gguf"],
            "file_hashes": {'a.b "c".gguf': "cd" * 32},
            "params": {"spec_type": "ngram-simple", "on": True, "ratio": float("inf"), "tiny": 1e-7},
            "study_name": 'gemma3-270m@GPU "quoted" \\ back\tslash\nnewline \x7f é:python',
        },
    ]


def test_unknown_format_is_a_value_error():
    with pytest.raises(ValueError, match="unknown preset export format 'yaml'"):
        export_presets([make_preset()], "yaml")


# the sh launcher, really run


@pytest.fixture
def bin_dir(tmp_path, monkeypatch) -> Iterator[Path]:
    """A folder for a stand-in nvidia-smi, put first on PATH (of this process too, for hardware_key());
    CUDA_VISIBLE_DEVICES starts unset and hardware_key()'s cache is cleared before and after."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", f"{path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    hardware.hardware_key.cache_clear()
    yield path
    hardware.hardware_key.cache_clear()


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


SMI_QUERY = "--query-gpu=index,uuid,name,memory.total,driver_version --format=csv,noheader,nounits"


def fake_gpus(bin_dir: Path, gpus: list[tuple[str, int | str]] | None) -> None:
    """nvidia-smi answering the hardware query with these (name, memory in MiB) GPUs, numbered from 0,
    or failing (no driver) when `gpus` is None; any other query fails too."""
    if gpus is None:
        write_script(bin_dir / "nvidia-smi", "echo 'NVIDIA-SMI has failed' >&2\nexit 9\n")
        return
    rows = "".join(
        f"{i}, GPU-{i}f00d-{name.replace(' ', '-')}, {name}, {mib}, 570.124.06\n" for i, (name, mib) in enumerate(gpus)
    )
    check_query = f'[ "$*" = {shlex.quote(SMI_QUERY)} ] || {{ echo "unexpected query: $*" >&2; exit 6; }}\n'
    write_script(bin_dir / "nvidia-smi", check_query + f"cat <<'EOF'\n{rows}EOF\n")


def run_launcher(
    tmp_path: Path, presets: list[Preset], *args: str, cuda_visible: str | None = None
) -> subprocess.CompletedProcess:
    launcher = tmp_path / "launch.sh"
    launcher.write_text(export_presets(presets, "sh"))
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}  # PATH has bin_dir first
    if cuda_visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible
    return subprocess.run(["sh", str(launcher), *args], capture_output=True, text=True, env=env, timeout=30)


def python_key(monkeypatch, cuda_visible: str | None = None) -> str:
    """hardware_key() of this process under the same stand-in and CUDA_VISIBLE_DEVICES."""
    if cuda_visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cuda_visible)
    hardware.hardware_key.cache_clear()
    return hardware.hardware_key()


@pytest.fixture
def print_args(tmp_path) -> str:
    """A stand-in llama-server that prints each argument on its own line."""
    return str(write_script(tmp_path / "fake llama-server", 'for arg in "$@"; do printf "%s\\n" "$arg"; done\n'))


def test_sh_export_is_valid_sh(tmp_path):
    presets = [make_preset(), make_preset("qwen3-8b", 'CPU it\'s "odd" $(rm -rf /)')]
    for batch in (presets, []):
        launcher = tmp_path / "launch.sh"
        launcher.write_text(export_presets(batch, "sh"))
        assert subprocess.run(["sh", "-n", str(launcher)], capture_output=True).returncode == 0


def test_sh_launcher_execs_the_preset_for_this_gpu(tmp_path, bin_dir, print_args):
    argv = (print_args, "-m", "/models/my model.gguf", "--odd", 'it\'s $HOME `date` "q"', "--spec-draft-n-max", "6")
    presets = [
        make_preset(argv=argv),
        make_preset(hardware=A100, argv=(print_args, "--wrong-gpu")),
        make_preset(hardware="NVIDIA H200", argv=(print_args, "--name-without-memory")),
        make_preset("qwen3-8b", argv=(print_args, "--wrong-model")),
    ]
    fake_gpus(bin_dir, [("NVIDIA H200", 143771)])
    done = run_launcher(tmp_path, presets, "gemma3-270m", "--port", "8080", "a b")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [*argv[1:], "--port", "8080", "a b"]


EIGHT_H200 = [("NVIDIA H200", 143771)] * 8


@pytest.mark.parametrize(
    ("gpus", "cuda_visible", "key"),
    [
        ([("NVIDIA H200", 143771)], None, "NVIDIA H200 140GiB"),
        ([("NVIDIA H200", 143771)] * 2, None, "2x NVIDIA H200 140GiB"),
        (EIGHT_H200, None, "8x NVIDIA H200 140GiB"),
        (EIGHT_H200, "3", "NVIDIA H200 140GiB"),
        (EIGHT_H200, "GPU-5f00d-NVIDIA-H200,0", "2x NVIDIA H200 140GiB"),
        (EIGHT_H200, "0,-1,1", "NVIDIA H200 140GiB"),
        (EIGHT_H200, "", None),
        ([("NVIDIA H200", 143771), ("NVIDIA A100-SXM4-80GB", 81920)], None, f"{A100} + {H200}"),
        ([("NVIDIA H200", 143771), ("NVIDIA A100-SXM4-80GB", 81920)], "1", A100),
        ([("Half B", 2560), ("Half A", 3584), ("Unknown", "[N/A]")], None, "Half A 4GiB + Half B 2GiB"),
        (None, None, None),
    ],
    ids=[
        "one",
        "two",
        "eight",
        "pinned-by-index",
        "pinned-by-uuid",
        "stops-at-invalid",
        "none-visible",
        "mixed",
        "mixed-pinned",
        "half-gib-rounds-to-even",
        "no-driver",
    ],
)
def test_sh_launcher_and_hardware_key_agree(tmp_path, bin_dir, print_args, monkeypatch, gpus, cuda_visible, key):
    """The launcher's sh hardware_key and autotune.hardware.hardware_key() give the same key (None: the
    CPU's) under the same nvidia-smi and CUDA_VISIBLE_DEVICES, and the launcher execs that key's preset."""
    fake_gpus(bin_dir, gpus)
    expected = key or _cpu_name()
    assert python_key(monkeypatch, cuda_visible) == expected
    presets = [
        make_preset(hardware=expected, argv=(print_args, "--this-machine")),
        make_preset(hardware="elsewhere", argv=(print_args, "--wrong-hardware")),
    ]
    done = run_launcher(tmp_path, presets, "--port", "8080", cuda_visible=cuda_visible)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["--this-machine", "--port", "8080"]


def test_sh_launcher_defaults_to_the_only_model_and_falls_back_to_the_cpu(tmp_path, bin_dir, print_args):
    presets = [
        make_preset(hardware=_cpu_name(), argv=(print_args, "--on-cpu")),
        make_preset(argv=(print_args, "--gpu")),
    ]
    fake_gpus(bin_dir, None)
    done = run_launcher(tmp_path, presets, "--port", "8080")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["--on-cpu", "--port", "8080"]


def test_sh_launcher_on_unknown_hardware_lists_the_presets_and_exits_2(tmp_path, bin_dir, print_args):
    presets = [make_preset(argv=(print_args,)), make_preset("qwen3-8b", A100, argv=(print_args,))]
    fake_gpus(bin_dir, [("NVIDIA GeForce RTX 4090", 24564)])
    done = run_launcher(tmp_path, presets, "gemma3-270m")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "no autotune preset for model 'gemma3-270m' on hardware 'NVIDIA GeForce RTX 4090 24GiB'" in done.stderr
    assert f"  gemma3-270m @ {H200}\n" in done.stderr
    assert f"  qwen3-8b @ {A100}\n" in done.stderr


def test_sh_launcher_needs_a_model_when_there_are_several(tmp_path, bin_dir, print_args):
    presets = [make_preset(argv=(print_args,)), make_preset("qwen3-8b", argv=(print_args,))]
    fake_gpus(bin_dir, [("NVIDIA H200", 143771)])
    done = run_launcher(tmp_path, presets)
    assert done.returncode == 2
    assert f"no autotune preset for model '' on hardware '{H200}'" in done.stderr


# llama-swap and llama-server's --models-preset INI, read back


AWKWARD_ARGV = (
    "/opt/llama cpp/llama-server",
    "-m",
    '/models/it\'s "my" $model é\x85.gguf',
    "-c",
    "4096",
    "-ngl",
    "all",
    "--seed",
    "-1",
    "--no-mmap",
    "--spec-type",
    "draft-simple",
    "--spec-draft-n-max",
    "6",
)


def test_llama_swap_export_parses_back_with_pyyaml():
    yaml = pytest.importorskip("yaml")
    presets = [
        make_preset(argv=AWKWARD_ARGV),
        make_preset(hardware=A100, tok_s=300.0),
        make_preset("qwen3-8b", 'CPU it\'s "odd" \\ \t', argv=("llama-server", "-m", "/m/q.gguf")),
    ]
    config = yaml.safe_load(export_presets(presets, "llama-swap"))
    # one entry per preset; a model with presets on several machines names each by its hardware
    assert list(config) == ["models"]
    assert sorted(config["models"]) == [f"gemma3-270m@{A100}", f"gemma3-270m@{H200}", "qwen3-8b"]
    for name, preset in zip([f"gemma3-270m@{H200}", f"gemma3-270m@{A100}", "qwen3-8b"], presets):
        entry = config["models"][name]
        assert set(entry) == {"cmd", "description"}
        assert "${PORT}" in entry["cmd"]
        # llama-swap substitutes ${PORT}, then splits cmd with POSIX shell rules
        assert shlex.split(entry["cmd"].replace("${PORT}", "5800")) == [*preset.argv, "--port", "5800"]
        assert entry["description"].startswith(
            f"{preset.tok_s:.1f} tok/s, {preset.speedup:.2f}x the baseline on {preset.hardware}"
        )
    assert yaml.safe_load(export_presets([], "llama-swap")) == {"models": {}}


def test_entry_names_are_unique_per_model_hardware_and_concurrency():
    presets = [make_preset(), make_preset("qwen3-8b"), make_preset("qwen3-8b", A100)]
    if "concurrency" in {f.name for f in dataclasses.fields(Preset)}:
        presets.append(make_preset(concurrency=4))
    names = entry_names(presets)
    assert names[:3] == ["gemma3-270m", f"qwen3-8b@{H200}", f"qwen3-8b@{A100}"]
    assert names[3:] in ([], ["gemma3-270m/np4"])
    assert len(set(names)) == len(names)


def test_llama_swap_export_refuses_what_llama_swap_would_read_as_a_macro():
    with pytest.raises(UsageError, match=r"an argument contains '\$\{'"):
        export_presets([make_preset(argv=("llama-server", "-m", "/m/${HOME}.gguf"))], "llama-swap")


def read_ini(text: str) -> configparser.ConfigParser:
    """The INI text as llama.cpp's reader sees it (common/preset.cpp): `key = value` lines, `;`/`#`
    comments, keys kept as written, options before the first section in a default one."""
    parser = configparser.ConfigParser(
        interpolation=None,
        comment_prefixes=(";", "#"),
        inline_comment_prefixes=(";", "#"),
        strict=True,
        default_section="\0",
    )
    parser.optionxform = str
    parser.read_string("[(top)]\n" + text)
    return parser


def test_ini_export_parses_back():
    presets = [
        make_preset(argv=AWKWARD_ARGV),
        make_preset("qwen3-8b", argv=("llama-server", "-m", "/m/q.gguf", "-fa", "on")),
    ]
    ini = read_ini(export_presets(presets, "ini"))
    assert ini.sections() == ["(top)", "gemma3-270m", "qwen3-8b"]
    assert dict(ini["(top)"]) == {"version": "1"}
    assert list(ini["gemma3-270m"].items()) == [
        ("m", '/models/it\'s "my" $model é\x85.gguf'),
        ("c", "4096"),
        ("ngl", "all"),
        ("seed", "-1"),
        ("no-mmap", "true"),
        ("spec-type", "draft-simple"),
        ("spec-draft-n-max", "6"),
    ]
    assert list(ini["qwen3-8b"].items()) == [("m", "/m/q.gguf"), ("fa", "on")]


@pytest.mark.parametrize("value", ["/models/a;b.gguf", "/models/#1.gguf", "two\nlines", " padded"])
def test_ini_export_refuses_a_value_llama_cpp_cannot_read(value):
    with pytest.raises(UsageError, match="cannot be written to an INI file"):
        export_presets([make_preset(argv=("llama-server", "-m", value))], "ini")


def test_presets_export_cli_refuses_an_unwritable_preset_with_one_line(url, tmp_path):
    with PresetStore(url) as store:
        store.save(make_preset(argv=("llama-server", "-m", "/models/a;b.gguf")))
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "presets", "export", "--format", "ini", "--storage", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "cannot be written to an INI file" in done.stderr


@pytest.mark.slow
def test_llama_server_router_runs_the_ini_export(tmp_path, tiny_dir, monkeypatch):
    """llama-server itself reads the exported file (router mode), starts the preset's model with the
    preset's flags, and answers a completion through it."""
    from autotune.engines.server_process import ServerProcess
    from autotune.llamacpp.server_binary import resolve_server_binary
    from autotune.spec.command import server_argv
    from autotune.spec.config import SpecConfig

    binary = resolve_server_binary()
    config = SpecConfig(
        tiny_dir / "tiny-target.gguf", "ngram-simple", params={"ngram_simple_size_n": 2, "ngram_simple_size_m": 4}
    )
    argv = server_argv(config, context_size=512, binary=str(binary))
    preset_file = tmp_path / "presets.ini"
    preset_file.write_text(export_presets([make_preset("tiny", argv=tuple(argv))], "ini"))
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "no-cached-models"))  # the router lists only the file's
    with ServerProcess(
        [str(binary), "--models-preset", str(preset_file), "--models-max", "1"],
        startup_timeout_s=60,
        request_timeout_s=60,
    ) as router:
        (listed,) = router_models(router)
        assert listed["id"] == "tiny" and listed["status"]["value"] == "unloaded"
        answer = router.post(
            "/completion",
            {"model": "tiny", "prompt": "a b c a b c a b c", "n_predict": 8, "temperature": 0, "cache_prompt": False},
            what="completion via the router",
        )
        assert answer["timings"]["predicted_n"] == 8
        (loaded,) = router_models(router)
    args = loaded["status"]["args"]
    assert loaded["status"]["value"] == "loaded"
    assert args[args.index("--model") + 1] == str(config.target)
    for flag, value in [
        ("--spec-type", "ngram-simple"),
        ("--spec-ngram-simple-size-n", "2"),
        ("--spec-ngram-simple-size-m", "4"),
        ("--ctx-size", "512"),
        ("--parallel", "1"),
        ("--temperature", "0"),
        ("--flash-attn", "on"),
    ]:  # llama.cpp writes each flag's long name
        assert args[args.index(flag) + 1] == value, (flag, args)


def router_models(router) -> list[dict]:
    status, body = router._http("GET", "/models", None, timeout=30)
    assert status == 200, body
    return body["data"]
