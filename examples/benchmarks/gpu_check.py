"""The device check's Python half (issue 57): what `gpu_check.sh --stage` downloads and packs here, and the
steps the check runs on the GPU machine after `python -m autotune.install server --backend cuda` built
llama.cpp there, or with `gpu_check.sh --cpu` here on the installed CPU builds. gpu_check.sh's header gives
the order and the device calls; each subcommand is one step of it.

* `stage [--dry-run]` (here, with PyPI): downloads into .gpu-check/files what the device lacks (KINDS.md:
  CPython 3.12, Linux x86-64, no network at all). The sources of llama.cpp's two packages, fetched as the
  installer fetches them (`autotune.install.wheelhouse.fetch_sdist`); for each source's isolated build the
  wheels of its pyproject.toml's [build-system] (plus cmake and ninja, which scikit-build-core asks for where
  their Python packages are installed, as there), and autotune's own (setuptools); the wheels of autotune's and llama-cpp-python's
  dependencies that the device image does not hold (DEVICE_PACKAGES). Each set is resolved by pip for the
  device's Python and platform (`pip install --dry-run --report`), then downloaded pinned. It checks offline
  what can be checked here: each build set resolves from the folder alone, and the installer's download
  step finds both sources there with PIP_NO_INDEX (how the device points the installer at the folder:
  PIP_NO_INDEX=1 PIP_FIND_LINKS=<folder>; no change to autotune.install). Last it packs everything into
  .gpu-check/carry1..N, at most 58 MiB each (a device call carries 64 MiB, the working tree's ~2.3 MiB
  included), in the order the device needs the files, a large file split across chunks, each chunk with the
  MANIFEST (sha256, size, kind, parts) that gpu_check.sh reassembles by. `--dry-run` prints what it would
  download and touches neither the network nor the disk.
* `pack FILES INTO [--chunk-bytes N]`: stage's last step alone (the tests pack small files with it).
* `quick` (the first minute: a failure ends the check with exit 1): the GPU(s) seen, `autotune doctor` on
  the builds the check measures, decoding the tiny model written here; then the qwen3 fixture pair at
  Qwen3's vocabulary of 151,936 tokens (autotune.testing.dspark_fixtures, random weights: a step costs what
  a real model's host work costs, little device work) through both engines, baseline, ngram-simple,
  draft-simple and draft-dspark (`-` where a llama-server lacks a type): decode tok/s in-process and on
  llama-server and their ratio, the in-process engine's host share of step time and host milliseconds a
  step (examples/benchmarks/_steps.py: time outside llama_decode), and the memory in use.
* `search`: the default `autotune search` (`--strategy predict`) on the tiny pair (target and draft-simple
  draft) under `--budget` (2m), its command and verdict passed through; a budget refused as too small for
  a verdict is retried once with the smallest that works, where that is at most `--max-budget` (4m) and
  fits `--seconds-left`.
* `plan`: `autotune search --plan` of qwen3-8b's space at 95 tok/s, priced with the prices file that
  gpu_prices.py (the step before, run by gpu_check.sh) wrote for this machine: what a real 8B search would
  cost here.

Every step prints its lines with its section in front (`doctor: `, `quick: `, `search: `, `plan: `) and
writes the figures a closing note quotes to <work>/figures/<step>.txt, one line each, which gpu_check.sh
prints at the end of every call (`figure: ...`) and copies to $OUT.

`gpu_check.sh --cpu --vocab 4096 --prompts 2 --max-tokens 16 --budget 4m` runs the whole check here in
about 3 minutes (tests/examples/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[2]
CONTEXT = 4096  # the fixture pair's contexts
MiB = 2**20

# --- what the device has, and the stage --------------------------------------------------------------------

#: The device's Python: what the wheels are resolved and downloaded for
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
#: The Python packages the device image ('cuda') holds, as /work/.library/device/KINDS.md listed them on
#: 2026-11-17: these travel only where a requirement needs another version (call 1 of the check says so).
DEVICE_PACKAGES = frozenset(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
    jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
    mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
    numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
    nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
    nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
    onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
    pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
    pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
    scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
    sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
    tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
    torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
    wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
)
#: What scikit-build-core (llama-cpp-python's build backend) adds to its build requirements where the `cmake` and
#: `ninja` Python packages are installed, as on the device (or no new enough program is on PATH): without their
#: wheels its offline build stops at "No matching distribution found for cmake>=3.21"
FIRST_BUILD_EXTRAS = ("cmake>=3.21", "ninja>=1.5")
#: A device call carries at most 64 MiB with the working tree; a chunk leaves room for the tree
CHUNK_MIB = 58
CALL_LIMIT_MIB = 64
#: Files under this size are never split across chunks
SPLIT_AT = 4 * MiB


class StageError(Exception):
    """A step of the stage failed: the message says which."""


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalized(re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0])


def device_tags() -> list[str]:
    """pip's options for wheels the device's CPython runs."""
    abi = "cp" + DEVICE_PYTHON.replace(".", "")
    tags = ["--only-binary=:all:", "--python-version", DEVICE_PYTHON, "--implementation", "cp", "--abi", abi]
    for platform in DEVICE_PLATFORMS:
        tags += ["--platform", platform]
    return tags


def pip(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False, env=env)


def failed(done: subprocess.CompletedProcess, what: str) -> StageError:
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:] or ["no output"]
    return StageError(f"{what} failed: {' / '.join(tail)}")


def offline_env(folder: Path) -> dict[str, str]:
    """This environment with pip pointed at `folder` alone, as the device's installer runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    return {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def autotune_requirements() -> tuple[list[str], list[str]]:
    """(autotune's dependencies with its `server` extra, its build requirements), from pyproject.toml."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    needs = project["project"]["dependencies"] + project["project"]["optional-dependencies"]["server"]
    return needs, project["build-system"]["requires"]


def sdist_requirements(sdist: Path) -> tuple[list[str], list[str]]:
    """(the runtime requirements, the build requirements) a source distribution states: its PKG-INFO's
    Requires-Dist without extras, its pyproject.toml's [build-system] requires."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    with tarfile.open(sdist) as tar:
        top = {name.split("/", 1)[0]: name for name in tar.getnames()}
        root = next(iter(top))
        info = email.parser.Parser().parsestr(tar.extractfile(f"{root}/PKG-INFO").read().decode())
        build = tomllib.loads(tar.extractfile(f"{root}/pyproject.toml").read().decode())["build-system"]["requires"]
    runtime = [r for r in info.get_all("Requires-Dist") or [] if "extra ==" not in r]
    return runtime, build


def resolve(requirements: list[str], scratch: Path) -> dict[str, str]:
    """{name: version} of everything pip installs for `requirements` in an empty CPython 3.12 on Linux
    x86-64 (what an isolated build environment holds, or the closure of the device's runtime needs)."""
    report = scratch / f"report-{len(list(scratch.glob('report-*')))}.json"
    done = pip(
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        str(report),
        "--target",
        str(scratch / "target"),
        *device_tags(),
        *requirements,
    )
    if done.returncode != 0:
        raise failed(done, f"resolving {' '.join(requirements)} for CPython {DEVICE_PYTHON}")
    installs = json.loads(report.read_text())["install"]
    return {normalized(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


def download(pins: dict[str, str], into: Path) -> list[Path]:
    """The wheels of `pins` for the device, downloaded into `into`; their paths."""
    if not pins:
        return []
    wanted = [f"{name}=={version}" for name, version in sorted(pins.items())]
    done = pip("download", "--no-deps", "--progress-bar", "off", "-d", str(into), *device_tags(), *wanted)
    if done.returncode != 0:
        raise failed(done, "downloading " + " ".join(wanted))
    found = {}
    for wheel in into.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        found[(normalized(name), version)] = wheel
    missing = [f"{n}=={v}" for n, v in pins.items() if (n, v) not in found]
    if missing:
        raise StageError(f"pip downloaded no wheel of {' '.join(missing)} into {into}")
    return [found[(n, v)] for n, v in sorted(pins.items())]


def stage_plan() -> dict:
    """What the stage downloads, as far as it is known before downloading: the sources and the roots of each
    wheel set."""
    from autotune.install.wheelhouse import LLAMA_CPP_PACKAGES

    needs, autotune_build = autotune_requirements()
    ours = [r for r in needs if requirement_name(r) not in LLAMA_CPP_PACKAGES]
    return {
        "sources": dict(LLAMA_CPP_PACKAGES),
        "runtime": ours,
        "on the device": sorted({requirement_name(r) for r in ours} & DEVICE_PACKAGES),
        "autotune build": autotune_build,
    }


def stage(into: Path, chunk_bytes: int, dry_run: bool) -> None:
    plan = stage_plan()
    tags = f"CPython {DEVICE_PYTHON}, manylinux x86-64"
    if dry_run:
        for package, requirement in plan["sources"].items():
            print(
                f"stage: would download the source {requirement} (the installer's fetch_sdist: pip download "
                f"--no-deps --no-binary {package})"
            )
        print(
            f"stage: would download wheels for {tags}, resolved with their dependencies by pip, of those the "
            f"device lacks: {', '.join(plan['runtime'])}, and llama-cpp-python's own requirements"
        )
        print(f"stage: on the device already (KINDS.md), not carried: {', '.join(plan['on the device'])}")
        print(
            "stage: would download the build wheels of each source's [build-system] (read from it; "
            f"{' '.join(FIRST_BUILD_EXTRAS)} with the first), and of autotune's: {' '.join(plan['autotune build'])}"
        )
        print(
            f"stage: would check them offline, then pack them into {into}/carry1..N, at most "
            f"{chunk_bytes / MiB:.0f} MiB each"
        )
        return
    from autotune.install.wheelhouse import fetch_sdist

    files = into / "files"
    shutil.rmtree(files, ignore_errors=True)
    files.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-stage-") as scratch:
        scratch = Path(scratch)
        sources = []
        for requirement in plan["sources"].values():
            started = time.monotonic()
            sources.append(fetch_sdist(requirement, files))
            print(
                f"stage: {sources[-1].name}: {sources[-1].stat().st_size / MiB:.1f} MiB "
                f"({time.monotonic() - started:.0f} s)",
                flush=True,
            )
        runtime = list(plan["runtime"])
        build_sets = []  # the first source's build set, then the later ones (the other sources', autotune's)
        for source in sources:
            needs, build = sdist_requirements(source)
            runtime += needs
            build_sets.append(build + ([] if build_sets else list(FIRST_BUILD_EXTRAS)))
        build_sets.append(list(plan["autotune build"]))
        first = download(resolve(build_sets[0], scratch), files)
        pins = {n: v for n, v in resolve(runtime, scratch).items() if n not in DEVICE_PACKAGES}
        carried = [w for w in download(pins, files) if w not in first]
        print(f"stage: runtime wheels (the device lacks them): {' '.join(w.name for w in carried)}", flush=True)
        later_pins: dict[str, str] = {}
        for needs in build_sets[1:]:
            later_pins.update(resolve(needs, scratch))
        later = [w for w in download(later_pins, files) if w not in first + carried]
        print(
            f"stage: build wheels (the isolated builds install them): {' '.join(w.name for w in first + later)}",
            flush=True,
        )
        check_offline(files, build_sets, plan["sources"], scratch)
    # the order the device needs them in: what the installer needs to start (the first source and its build
    # wheels; it is standard library alone), then autotune's dependencies (for the check, and the installer's
    # last step, `pip install -e .[server]`), then what it fetches once the first source is built
    order = [(w, "build") for w in first] + [(sources[0], "source")] + [(w, "runtime") for w in carried]
    order += [(w, "later") for w in later] + [(s, "later") for s in sources[1:]]
    chunks = pack(order, into, chunk_bytes)
    tree = tree_bytes()
    for chunk in chunks:
        size = sum(f.stat().st_size for f in chunk.iterdir())
        print(
            f"stage: {chunk}: {size / MiB:.1f} MiB; with the working tree's {tree / MiB:.1f} MiB, "
            f"{(size + tree) / MiB:.1f} of the {CALL_LIMIT_MIB} MiB a call carries"
            + ("" if size + tree <= CALL_LIMIT_MIB * MiB else ": TOO MUCH, stage again with a smaller --chunk-mib")
        )
    print(f"stage: {len(chunks)} chunk(s): device call k carries [.gpu-check/carryk] (gpu_check.sh's header)")


def check_offline(files: Path, build_sets: list[list[str]], sources: dict[str, str], scratch: Path) -> None:
    """What can be checked here of the device's offline install: each build set resolves from `files` alone,
    and the installer's fetch_sdist finds each source there with PIP_NO_INDEX (which prepares its metadata
    in an isolated environment from the build wheels)."""
    env = offline_env(files)
    for needs in build_sets:
        done = pip("download", "-q", "-d", str(scratch / "offline"), *device_tags(), *needs, env=env)
        if done.returncode != 0:
            raise failed(done, f"resolving {' '.join(needs)} offline from {files}")
    for package, requirement in sources.items():
        done = pip(
            "download", "-q", "--no-deps", "--no-binary", package, "-d", str(scratch / "sources"), requirement, env=env
        )
        if done.returncode != 0:
            raise failed(done, f"the installer's download of {requirement} offline from {files}")
    print(f"stage: offline from {files}: the build sets resolve and the installer finds both sources", flush=True)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(MiB), b""):
            digest.update(block)
    return digest.hexdigest()


def pack(files: list[tuple[Path, str]], into: Path, chunk_bytes: int) -> list[Path]:
    """`files` (each with its kind: build and source, what the installer needs to start; runtime, autotune's
    dependencies; later, what the installer needs once the first source is built) into `into`/carry1..N of at most
    `chunk_bytes` each, in order; a file of SPLIT_AT or more that does not fit is split (name.part1, ...) where
    the chunk has SPLIT_AT left, else it starts the next chunk.
    Every chunk holds the MANIFEST: a comment line, then per file its sha256, size, kind, name and parts
    (chunk/file), tab-separated. The chunks' paths."""
    for old in into.glob("carry*"):
        shutil.rmtree(old)
    chunks: list[list[tuple[str, Path, int, int]]] = [[]]  # (part name, source, offset, length)
    room = chunk_bytes
    lines = []
    for path, kind in files:
        size, offset, parts = path.stat().st_size, 0, []
        while offset < size or not parts:
            left = size - offset
            if left > room and (left < SPLIT_AT or room < SPLIT_AT) and chunks[-1]:
                chunks.append([])
                room = chunk_bytes
            take = min(left, room)
            whole = take == size
            name = path.name if whole else f"{path.name}.part{len(parts) + 1}"
            chunks[-1].append((name, path, offset, take))
            parts.append(f"carry{len(chunks)}/{name}")
            offset += take
            room -= take
        lines.append("\t".join([sha256(path), str(size), kind, path.name, " ".join(parts)]))
    manifest = (
        f"# gpu_check.sh --stage, {time.strftime('%Y-%m-%d %H:%M')}: {len(chunks)} chunks; sha256, size, kind, name, "
        "parts\n" + "".join(f"{line}\n" for line in lines)
    )
    made = []
    for number, chunk in enumerate(chunks, start=1):
        folder = into / f"carry{number}"
        folder.mkdir(parents=True)
        for name, source, offset, length in chunk:
            if offset == 0 and length == source.stat().st_size:
                try:
                    os.link(source, folder / name)
                except OSError:
                    shutil.copyfile(source, folder / name)
                continue
            with source.open("rb") as reader, (folder / name).open("wb") as writer:
                reader.seek(offset)
                writer.write(reader.read(length))
        (folder / "MANIFEST").write_text(manifest)
        made.append(folder)
    return made


def tree_bytes() -> int:
    """Bytes of the working tree a device call sends: tracked and untracked-but-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=False,
    ).stdout.split(b"\0")
    return sum((REPO / name.decode()).stat().st_size for name in listed if name and (REPO / name.decode()).is_file())


# --- the check's steps ----------------------------------------------------------------------------------


class Figures:
    """The figures of one step, one line each, in <work>/figures/<name>.txt (started afresh with the step)."""

    def __init__(self, work: Path, name: str):
        self.path = work / "figures" / f"{name}.txt"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def add(self, line: str) -> None:
        with self.path.open("a") as out:
            out.write(line.rstrip() + "\n")


def used_mib() -> tuple[str, str]:
    """(MiB in use on the GPUs, all of it as the devices report, else this process's resident set with " rss"
    after it; the same in words)."""
    from autotune.engines import memory

    gpus = [d for d in memory.devices() if d.is_gpu]
    if gpus:
        used = "+".join(f"{(d.total - d.free) / 2**20:.0f}" for d in gpus)
        return used, f"{used} MiB in use on the GPU"
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    resident = f"{pages * os.sysconf('SC_PAGE_SIZE') / 2**20:.0f}"
    return f"{resident} rss", f"{resident} MiB resident (no GPU)"


def server_runs(server, config) -> bool:
    """Whether this llama-server has the type and every flag of `config` (PCTree's need a fork's)."""
    from autotune.spec.types import SPEC_TYPE_PARAMS

    known = SPEC_TYPE_PARAMS[config.spec_type]
    return config.spec_type in server.runnable_spec_types and all(
        server.supports_param(known[name]) for name in config.params
    )


def compare(label: str, configs: dict, mix, max_tokens: int, server, threads: int | None) -> tuple[list[str], int]:
    """Each configuration on both engines, a row each (`label: ...`); (the figures, how many failed)."""
    from host_overhead import measure_profiled

    from autotune.engines.python import PythonEngine
    from autotune.errors import AutotuneError

    print(
        f"{label}: {'config':<26}{'python tok/s':>13}{'server tok/s':>13}{'ratio':>7}{'host %':>8}"
        f"{'host ms/step':>13}{'used MiB':>10}",
        flush=True,
    )
    figures, errors = [], 0
    with PythonEngine(context_size=CONTEXT, threads=threads) as engine:
        for name, config in configs.items():
            try:
                tally, ours = measure_profiled(engine, config, mix, max_tokens)
            except AutotuneError as exc:
                print(f"{label}: {name:<26} python: {exc}", flush=True)
                figures.append(f"{label} {name}: in-process failed: {exc}")
                errors += 1
                continue
            used, used_words = used_mib()
            theirs = None
            if server is not None and server_runs(server, config):
                try:
                    theirs = server.measure(config, mix, max_tokens=max_tokens).mix_tok_s
                except AutotuneError as exc:
                    print(f"{label}: {name:<26} server: {exc}", flush=True)
                    figures.append(f"{label} {name}: llama-server failed: {exc}")
                    errors += 1
            shown = (
                f"{theirs:>13.1f}{ours.mix_tok_s / theirs:>7.2f}" if theirs else f"{'-':>13}{'-':>7}"
            )  # '-': not on it
            print(
                f"{label}: {name:<26}{ours.mix_tok_s:>13.1f}{shown}{100 * tally.host_share:>7.1f}%"
                f"{tally.host_ms_per_step:>13.3f}{used:>10}",
                flush=True,
            )
            on_server = (
                f"llama-server {theirs:.1f} tok/s, ratio {ours.mix_tok_s / theirs:.2f}"
                if theirs
                else "not on llama-server"
            )
            figures.append(
                f"{label} {name}: in-process {ours.mix_tok_s:.1f} tok/s, {on_server}; host {100 * tally.host_share:.1f}% "
                f"of a step, {tally.host_ms_per_step:.3f} ms a step; {used_words}"
            )
    return figures, errors


def fixture(work: Path, vocab: int) -> dict[str, Path]:
    """The qwen3 pair at `vocab` tokens under <work>/fixture (written once per vocabulary), the tiny search
    space over its target and draft-simple draft (<work>/tiny.toml), and <work>/models holding both."""
    from autotune.testing.dspark_fixtures import write_qwen3_pair
    from autotune.testing.tiny_gguf import tiny_space

    root, models = work / "fixture", work / "models"
    names = {"target": root / "target.gguf", "draft": root / "draft.gguf", "dspark": root / "dspark.gguf"}
    stamp = root / "VOCAB"
    if not (stamp.is_file() and stamp.read_text() == str(vocab)):
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        started = time.monotonic()
        write_qwen3_pair(root, vocab_size=vocab, ctx=CONTEXT)
        stamp.write_text(str(vocab))
        print(f"quick: wrote the qwen3 pair at {vocab:,} tokens in {time.monotonic() - started:.1f} s", flush=True)
    shutil.rmtree(models, ignore_errors=True)
    models.mkdir()
    (models / "tiny-target.gguf").symlink_to(names["target"])
    (models / "tiny-draft.gguf").symlink_to(names["draft"])
    (work / "tiny.toml").write_text(tiny_space("tiny-draft.gguf"))
    return names


def prompts_file(work: Path, count: int) -> Path:
    """The first `count` prompts of the bundled mix, one per category, as a --prompts file."""
    from autotune.measure.prompts import load_prompt_mix

    path = work / "prompts.jsonl"
    chosen = load_prompt_mix().take(per_category=1).prompts[:count]
    path.write_text("".join(json.dumps({"id": p.id, "category": p.category, "prompt": p.text}) + "\n" for p in chosen))
    return path


def autotune(*args: str, label: str) -> tuple[int, list[str]]:
    """`autotune ARGS` in a child process, each line (stdout and stderr) printed with `label` in front as it
    comes; (its exit code, its lines)."""
    argv = [sys.executable, "-m", "autotune", *args]
    child = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []
    for line in child.stdout:
        lines.append(line.rstrip("\n"))
        print(f"{label}: {lines[-1]}", flush=True)
    return child.wait(), lines


def quick(args: argparse.Namespace) -> int:
    """The first minute (module docstring); 1 where something failed."""
    from autotune.engines import memory
    from autotune.engines.server import ServerEngine
    from autotune.measure.prompts import PromptMix, load_prompt_mix
    from autotune.spec.config import SpecConfig

    work = args.work
    figures = Figures(work, "3-quick")
    for device in memory.devices():
        line = (
            f"{device.name} ({device.description}), {device.total / 2**30:.1f} GiB, {device.free / 2**30:.1f} GiB free"
        )
        print(f"device: {line}", flush=True)
        figures.add(f"device: {line}")
    files = fixture(work, args.vocab)
    started = time.monotonic()
    code, lines = autotune(
        "doctor", "--model", "tiny", "--space", str(work / "tiny.toml"), "--models-dir", str(work / "models"),
        label="doctor",
    )  # fmt: skip
    figures.add(f"doctor: {time.monotonic() - started:.1f} s, exit {code}")
    for line in lines:
        if not line.startswith(("model:", "cpu:")):
            figures.add(f"doctor: {line}")
    if code != 0:
        print("quick: doctor found a problem (above): the check stops here", flush=True)
        figures.add("quick: doctor found a problem: the check stopped there")
        return 1
    mix = PromptMix("check", tuple(load_prompt_mix().take(per_category=1).prompts[: args.prompts]))
    target = files["target"]
    configs = {
        "none": SpecConfig(target),
        "ngram-simple n2 m8": SpecConfig(
            target, "ngram-simple", None, {"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}
        ),
        "draft-simple n_max=4": SpecConfig(target, "draft-simple", files["draft"], {"draft_n_max": 4}),
        "draft-dspark n_max=8": SpecConfig(target, "draft-dspark", files["dspark"], {"draft_n_max": 8}),
    }
    server = None if args.no_server else ServerEngine(context_size=CONTEXT, threads=args.threads)
    try:
        if server is not None:
            print(f"server: {server.binary} ({server.build_info})", flush=True)
        started = time.monotonic()
        rows, errors = compare("quick", configs, mix, args.max_tokens, server, args.threads)
    finally:
        if server is not None:
            server.close()
    for row in rows:
        figures.add(row)
    took = time.monotonic() - started
    figures.add(
        f"quick: the qwen3 pair at {args.vocab:,} tokens, {len(mix.prompts)} prompt(s) x {args.max_tokens} tokens, "
        f"{len(configs)} configurations on both engines in {took:.0f} s"
    )
    if errors:
        print(f"quick: {errors} measurement(s) failed (above): the check stops here", flush=True)
        return 1
    return 0


def search(args: argparse.Namespace) -> int:
    """The default search on the tiny pair (module docstring); its exit code."""
    work = args.work
    figures = Figures(work, "4-search")
    if not (work / "tiny.toml").is_file():
        fixture(work, args.vocab)
    prompts = prompts_file(work, args.prompts)
    budget = args.budget
    for attempt in (1, 2):
        database = work / "search.db"
        database.unlink(missing_ok=True)  # a search of its own, not an answer from an earlier one
        argv = [
            "search", "--model", "tiny", "--space", str(work / "tiny.toml"), "--models-dir", str(work / "models"),
            "--prompts", str(prompts), "--max-tokens", str(args.max_tokens), "--budget", budget, "--seed", "0",
            "--storage", f"sqlite:///{database}", *args.search_args.split(),
        ]  # fmt: skip
        print(f"search: autotune {' '.join(argv)}", flush=True)
        started = time.monotonic()
        code, lines = autotune(*argv, label="search")
        took = time.monotonic() - started
        print(f"search: exit {code}", flush=True)
        found = (re.search(r"give at least --budget ([0-9.]+)m", line) for line in lines)
        refused = next((match for match in found if match), None)
        if code == 2 and refused and attempt == 1:
            smallest = float(refused.group(1))
            fits = args.seconds_left is None or smallest * 60 + 90 <= args.seconds_left - took
            figures.add(f"search: --budget {budget} refused as too small for a verdict here: {refused.group(0)}")
            if smallest <= parse_minutes(args.max_budget) and fits:
                budget = f"{smallest:g}m"
                continue
        break
    figures.add(
        f"search: autotune search --model tiny (the qwen3 pair at {args.vocab:,} tokens) --budget {budget} "
        f"--max-tokens {args.max_tokens}, {args.prompts} prompt(s): exit {code} in {took:.0f} s"
    )
    for line in lines:
        if line.startswith(("autotune: budget:", "autotune: plan: up to", "autotune: cost:", "autotune: error:")):
            figures.add(f"search: {line.removeprefix('autotune: ')}")
        elif line.startswith("#") or ("llama-server" in line and " -m " in line and not line.startswith("autotune:")):
            figures.add(f"search: {line}")  # the verdict and the command it prints
    return code


def parse_minutes(text: str) -> float:
    """Minutes of a duration as --budget takes it (90s, 2m, 1h)."""
    unit = {"s": 1 / 60, "m": 1, "h": 60}.get(text[-1:], 1)
    return float(text.rstrip("smh")) * unit


def plan(args: argparse.Namespace) -> int:
    """qwen3-8b's plan priced with this machine's prices; its exit code."""
    work = args.work
    figures = Figures(work, "6-plan")
    empty = work / "no-models"
    empty.mkdir(exist_ok=True)
    argv = [
        "search", "--model", "qwen3-8b", "--offline", "--plan-tok-s", "95", "--models-dir", str(empty),
        "--max-tokens", "512", "--per-category", "4", "--plan", "--storage", f"sqlite:///{work / 'plan-never.db'}",
    ]  # fmt: skip
    print(f"plan: autotune {' '.join(argv)}", flush=True)
    code, lines = autotune(*argv, label="plan")
    print(f"plan: exit {code}", flush=True)
    figures.add(
        f"plan: autotune search --model qwen3-8b --plan --plan-tok-s 95 --max-tokens 512 --per-category 4: exit {code}"
    )
    for line in lines:
        if not line.startswith(("autotune:", "downloading ")) or line.startswith("autotune: error"):
            figures.add(f"plan: {line}")
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    staged = commands.add_parser("stage", help="download and pack what the device lacks (here, with PyPI)")
    staged.add_argument("--into", type=Path, default=REPO / ".gpu-check")
    staged.add_argument("--chunk-mib", type=float, default=CHUNK_MIB)
    staged.add_argument("--dry-run", action="store_true", help="print what it would download; no network, no files")
    packed = commands.add_parser("pack", help="pack FILES (in name order, all of kind 'build') into INTO/carry*")
    packed.add_argument("files", type=Path)
    packed.add_argument("into", type=Path)
    packed.add_argument("--chunk-bytes", type=int, default=CHUNK_MIB * MiB)
    for name in ("quick", "search", "plan"):
        step = commands.add_parser(name)
        step.add_argument("--work", type=Path, required=True, help="the check's folder (models, figures)")
        step.add_argument("--vocab", type=int, default=151_936)
        step.add_argument("--prompts", type=int, default=4, help="prompts of the bundled mix, one per category")
        step.add_argument("--max-tokens", type=int, default=32)
        step.add_argument("--threads", type=int, default=None)
        step.add_argument("--no-server", action="store_true", help="in-process figures only")
        step.add_argument("--budget", default="2m", help="the search's --budget")
        step.add_argument("--max-budget", default="4m", help="the most a refused budget is raised to")
        step.add_argument("--seconds-left", type=float, default=None, help="what this device call has left")
        step.add_argument("--search-args", default="", help="more options of the search")
    args = parser.parse_args()
    try:
        if args.command == "stage":
            stage(args.into, int(args.chunk_mib * MiB), args.dry_run)
        elif args.command == "pack":
            for chunk in pack([(f, "build") for f in sorted(args.files.iterdir())], args.into, args.chunk_bytes):
                print(f"pack: {chunk}: {sum(f.stat().st_size for f in chunk.iterdir())} bytes")
        else:
            args.work.mkdir(parents=True, exist_ok=True)
            sys.exit({"quick": quick, "search": search, "plan": plan}[args.command](args))
    except StageError as error:
        print(f"stage: error: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
