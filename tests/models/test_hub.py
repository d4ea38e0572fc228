"""Model files from the Hugging Face Hub: sources in the search space, the hub cache read by the real
huggingface_hub, offline nights, and the revision carried into trials, presets and exports.

huggingface.co cannot be reached from these machines. The cache is written here as the library lays
it out and read back by the library itself (`local_files_only`); offline means the library's own
switch (`HF_HUB_OFFLINE=1`) or an endpoint nothing listens on; downloads, and a download that breaks
off, go to `LocalHubEndpoint`, an HTTP server on 127.0.0.1 that answers the hub's file requests.
"""

from __future__ import annotations

import json
import os
import shlex
import textwrap
from pathlib import Path

import optuna
import pytest
import yaml
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.errors import HubSourceError, SearchSpaceError
from autotune.models.files import resolve_model_files
from autotune.models.hub import file_revisions, format_size, hub_files
from autotune.models.releases import follow_releases
from autotune.presets.confirmed import preset_from
from autotune.presets.export import export_presets
from autotune.spec.space import HubSource, load_space
from autotune.study.verdict import RacedConfig, RaceVerdict
from autotune.testing import tiny_gguf
from autotune.testing.hub_fixtures import HubRepo, LocalHubEndpoint, repo_folder, write_hub_cache
from storage import resolve_storage_url
from storage.presets import PresetStore

C1 = "1" * 40
C2 = "2" * 40
REPO = "org/tiny-drafts"

HUB_SPACE = """
[model]
name = "tiny"
target = "tiny-target.gguf"
context_size = 512

[drafts.draft-simple]
hf = "org/tiny-drafts"
file = "draft-{quant}.gguf"
quants = ["A"]
{revision}
[spec_types.draft-simple]
draft_n_max = [1, 4]
"""


def write_space(tmp_path: Path, text: str = HUB_SPACE, revision: str | None = None) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(textwrap.dedent(text).replace("{revision}", f'revision = "{revision}"' if revision else ""))
    return path


@pytest.fixture
def cache_dir() -> Path:
    return Path(os.environ["HF_HUB_CACHE"])  # conftest points it at this test's tmpdir


@pytest.fixture
def target_only(tmp_path, tiny_dir) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny-target.gguf").write_bytes((tiny_dir / "tiny-target.gguf").read_bytes())
    return models


def draft_bytes(tiny_dir: Path) -> bytes:
    return (tiny_dir / "tiny-draft.gguf").read_bytes()


class Notes:
    def __init__(self):
        self.lines: list[str] = []

    def note(self, text: str) -> None:
        self.lines.append(text)


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


#: the status each exit code of `autotune nightly` stands for, as docs/cli.md ("Exit codes") documents it; the
#: one line a night prints starts with it
NIGHT_STATUS = {0: "improved", 3: "unchanged", 4: "regressed"}


def night(args: list[str], allowed: tuple[int, ...]):
    """`autotune nightly ARGS` of the tiny model: its exit code is one of `allowed`, and its one line on
    stdout says the status that code stands for."""
    result = invoke(*args)
    assert result.exit_code in allowed, result.output
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"{NIGHT_STATUS[result.exit_code]}: tiny: "), result.output
    return result


# --- search-space keys


def test_tables_name_their_hub_source(tmp_path):
    space = load_space(
        write_space(
            tmp_path,
            HUB_SPACE.replace(
                'target = "tiny-target.gguf"',
                'target = "t-{quant}.gguf"\nquants = ["Q8_0"]\nhf = "org/targets"\nrevision = "v2"',
            ),
            revision=C1,
        )
    )
    assert space.model.targets.source == HubSource("org/targets", "v2")
    assert [d.source for d in space.drafts["draft-simple"]] == [HubSource(REPO, C1)]
    assert [f.label for f in hub_files(space)] == ["org/targets@v2/t-Q8_0.gguf", f"{REPO}@{C1}/draft-A.gguf"]


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (('hf = "org/tiny-drafts"', 'repo = "org/tiny-drafts"'), "drafts.draft-simple.repo: unknown key"),
        (('hf = "org/tiny-drafts"', 'revision = "main"'), "drafts.draft-simple.revision: needs hf"),
        (('file = "draft-{quant}.gguf"', 'file = "draft-*.gguf"'), "drafts.draft-simple.file: with hf"),
        (('quants = ["A"]', ""), "drafts.draft-simple.quants: with hf"),
        (('hf = "org/tiny-drafts"', 'hf = "tiny-drafts"'), "drafts.draft-simple.hf: expected a hub repo id"),
        (('hf = "org/tiny-drafts"', 'hf = "org--x/drafts"'), "drafts.draft-simple.hf: expected a hub repo id"),
        (('hf = "org/tiny-drafts"', "hf = 3"), "drafts.draft-simple.hf: expected a non-empty string"),
        (('target = "tiny-target.gguf"', 'target = "tiny-target.gguf"\nrevision = "x"'), "model.revision: needs hf"),
    ],
)
def test_a_bad_source_is_refused_naming_its_key(tmp_path, change, key):
    path = write_space(tmp_path, HUB_SPACE.replace(*change))
    with pytest.raises(SearchSpaceError, match=key.replace(".", r"\.")):
        load_space(path)


def test_pull_with_a_bad_source_is_one_line_exit_2_and_writes_nothing(tmp_path, cache_dir):
    path = write_space(tmp_path, HUB_SPACE.replace('file = "draft-{quant}.gguf"', 'file = "draft-*.gguf"'))
    result = invoke("pull", "--model", "tiny", "--space", str(path))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "drafts.draft-simple.file" in result.stderr and not cache_dir.exists()


# --- the hub cache, read by the real library


def test_files_resolve_from_the_hub_cache_with_their_revision(tmp_path, tiny_dir, target_only, cache_dir):
    write_hub_cache(cache_dir, REPO, C1, {"draft-A.gguf": draft_bytes(tiny_dir)})
    files = resolve_model_files(load_space(write_space(tmp_path)), target_only)
    (draft,) = files.drafts["draft-simple"]
    assert draft == repo_folder(cache_dir, REPO) / "snapshots" / C1 / "draft-A.gguf"
    assert file_revisions(files.paths) == {"draft-A.gguf": {"repo": REPO, "revision": C1}}

    write_hub_cache(cache_dir, REPO, C2, {"draft-A.gguf": draft_bytes(tiny_dir) + b"\0"})  # main moves to C2
    (draft,) = resolve_model_files(load_space(write_space(tmp_path)), target_only).drafts["draft-simple"]
    assert draft.parent.name == C2
    (pinned,) = resolve_model_files(load_space(write_space(tmp_path, revision=C1)), target_only).drafts["draft-simple"]
    assert pinned.parent.name == C1  # a pinned revision stays where it is pinned


def test_the_hub_cache_comes_before_a_copy_in_the_models_dir(tmp_path, tiny_dir, target_only, cache_dir):
    (target_only / "draft-A.gguf").write_bytes(draft_bytes(tiny_dir))
    space = load_space(write_space(tmp_path))
    (draft,) = resolve_model_files(space, target_only).drafts["draft-simple"]
    assert draft == target_only / "draft-A.gguf" and file_revisions([draft]) == {}  # nothing cached: the copy
    write_hub_cache(cache_dir, REPO, C1, {"draft-A.gguf": draft_bytes(tiny_dir)})
    (draft,) = resolve_model_files(space, target_only).drafts["draft-simple"]
    assert draft.parent.name == C1


def test_a_file_in_neither_place_is_left_out_with_the_pull_hint(tmp_path, target_only):
    files = resolve_model_files(load_space(write_space(tmp_path)), target_only)
    assert files.drafts["draft-simple"] == ()
    assert files.missing == (f"draft-A.gguf of {REPO} (`autotune pull` downloads it)",)


def test_targets_may_come_from_the_hub_too(tmp_path, tiny_dir, cache_dir, autotune_home):
    space = write_space(
        tmp_path,
        HUB_SPACE.replace('target = "tiny-target.gguf"', 'target = "tiny-target.gguf"\nhf = "org/tiny-target"'),
    )
    empty = tmp_path / "empty-models"
    result = invoke(
        "search", "--strategy", "measure", "--model", "tiny", "--space", str(space), "--models-dir", str(empty)
    )
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        f"autotune: error: no file matching 'tiny-target.gguf' from org/tiny-target in the hub cache or {empty}: "
        "run `autotune pull --model tiny` to download it"
    ]
    assert not (autotune_home / "autotune.db").exists()  # bad input writes nothing
    write_hub_cache(
        cache_dir, "org/tiny-target", C1, {"tiny-target.gguf": (tiny_dir / "tiny-target.gguf").read_bytes()}
    )
    write_hub_cache(cache_dir, REPO, C2, {"draft-A.gguf": draft_bytes(tiny_dir)})
    files = resolve_model_files(load_space(space), empty)
    assert file_revisions(files.paths) == {
        "tiny-target.gguf": {"repo": "org/tiny-target", "revision": C1},
        "draft-A.gguf": {"repo": REPO, "revision": C2},
    }


def test_only_the_drafts_of_searched_types_are_pulled(tmp_path):
    space = load_space(
        write_space(tmp_path, HUB_SPACE + '[drafts.draft-dspark]\nhf = "org/dspark"\nfile = "dspark.gguf"\n')
    )
    assert [f.label for f in hub_files(space)] == [f"{REPO}/draft-A.gguf"]


def test_a_search_does_not_resume_across_a_new_release(tmp_path, tiny_dir, target_only, cache_dir):
    write_hub_cache(cache_dir, REPO, C1, {"draft-A.gguf": draft_bytes(tiny_dir)})
    args = [
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(write_space(tmp_path)),
        "--models-dir",
        str(target_only),
        "--max-tokens",
        "8",
        "--per-category",
        "1",
        "--no-confirm",
        "--no-pruning",
    ]
    first = invoke(*args, "--trials", "2")
    assert first.exit_code == 0, first.output
    write_hub_cache(cache_dir, REPO, C2, {"draft-A.gguf": draft_bytes(tiny_dir) + b"\0"})  # pulled: main is C2
    again = invoke(*args, "--trials", "3")
    assert again.exit_code == 2
    assert "the model files changed since study" in again.stderr and "autotune nightly" in again.stderr


# --- offline


def test_pull_offline_finds_what_is_cached_and_fails_on_what_is_not(tmp_path, tiny_dir, cache_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    space = write_space(tmp_path)
    missing = invoke("pull", "--model", "tiny", "--space", str(space))
    assert missing.exit_code == 1
    assert missing.stderr.strip() == (
        f"autotune: error: cannot download {REPO}/draft-A.gguf: offline mode (HF_HUB_OFFLINE=1)"
    )
    write_hub_cache(cache_dir, REPO, C1, {"draft-A.gguf": draft_bytes(tiny_dir)})
    present = invoke("pull", "--model", "tiny", "--space", str(space))
    assert present.exit_code == 0, present.output
    assert present.stdout.split("\t") == [
        str(repo_folder(cache_dir, REPO) / "snapshots" / C1 / "draft-A.gguf"),
        f"{REPO}@{C1}",
        "present\n",
    ]


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (("HF_HUB_OFFLINE", "1"), "offline mode (HF_HUB_OFFLINE=1)"),
        (("HF_ENDPOINT", "http://127.0.0.1:9"), "cannot reach the hub (ConnectError"),
    ],
)
def test_a_night_without_the_hub_says_so_once_and_keeps_the_files(
    tmp_path, tiny_dir, cache_dir, monkeypatch, env, said
):
    monkeypatch.setenv(*env)
    snapshot = write_hub_cache(cache_dir, REPO, C1, {"draft-A.gguf": draft_bytes(tiny_dir)})["draft-A.gguf"]
    notes = Notes()
    follow_releases(load_space(write_space(tmp_path)), notes.note)
    assert len(notes.lines) == 1 and said in notes.lines[0] and "going on with the files on disk" in notes.lines[0]
    assert sorted(p.name for p in snapshot.parent.parent.iterdir()) == [C1]


# --- downloads through a local hub endpoint


def test_pull_downloads_what_is_missing_into_the_hub_cache_only(
    tmp_path, tiny_dir, target_only, cache_dir, monkeypatch
):
    space = write_space(tmp_path)
    with LocalHubEndpoint({REPO: HubRepo(C1, {"draft-A.gguf": draft_bytes(tiny_dir)})}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first = invoke("pull", "--model", "tiny", "--space", str(space))
        assert first.exit_code == 0, first.output
        assert first.stdout.endswith(f"\t{REPO}@{C1}\tdownloaded\n")
        downloads = [r for r in hub.requests if r.startswith("GET /org")]
        second = invoke("pull", "--model", "tiny", "--space", str(space))
        assert second.stdout.endswith("\tpresent\n")
        assert [r for r in hub.requests if r.startswith("GET /org")] == downloads  # nothing fetched again
    assert sorted(p.name for p in target_only.iterdir()) == ["tiny-target.gguf"]
    (draft,) = resolve_model_files(load_space(space), target_only).drafts["draft-simple"]
    assert draft.read_bytes() == draft_bytes(tiny_dir) and draft.parent.name == C1


def test_a_night_downloads_a_new_revision(tmp_path, tiny_dir, target_only, cache_dir, monkeypatch):
    write_hub_cache(cache_dir, REPO, C1, {"draft-A.gguf": draft_bytes(tiny_dir)})
    released = draft_bytes(tiny_dir) + b"\0"
    space = load_space(write_space(tmp_path))
    notes = Notes()
    with LocalHubEndpoint({REPO: HubRepo(C2, {"draft-A.gguf": released})}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        follow_releases(space, notes.note)
        assert notes.lines == [f"downloading {REPO}/draft-A.gguf (a new revision, {format_size(len(released))})"]
        follow_releases(space, notes.note)  # the same revision again: nothing to download
        assert len(notes.lines) == 1
    (draft,) = resolve_model_files(space, target_only).drafts["draft-simple"]
    assert draft.parent.name == C2 and draft.read_bytes() == released


def test_a_night_with_a_bad_prompt_file_stops_before_asking_the_hub(tmp_path, tiny_dir, target_only, monkeypatch):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("{not json\n")
    with LocalHubEndpoint({REPO: HubRepo(C1, {"draft-A.gguf": draft_bytes(tiny_dir)})}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke(
            "nightly",
            "--model",
            "tiny",
            "--space",
            str(write_space(tmp_path)),
            "--models-dir",
            str(target_only),
            "--prompts",
            str(prompts),
        )
    assert result.exit_code == 2 and str(prompts) in result.stderr
    assert hub.requests == []


@pytest.mark.parametrize(
    ("repos", "revision", "message"),
    [
        ({}, None, f"no repository {REPO} on the hub"),
        ({REPO: HubRepo(C1, {"draft-B.gguf": b"x"})}, None, f"{REPO} has no file draft-A.gguf at revision main"),
        ({REPO: HubRepo(C1, {"draft-A.gguf": b"x"})}, "v9", f"{REPO} has no revision 'v9'"),
    ],
)
def test_a_repo_revision_or_file_that_does_not_exist_is_bad_input(
    tmp_path, cache_dir, monkeypatch, repos, revision, message
):
    space = write_space(tmp_path, revision=revision)
    with LocalHubEndpoint(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke("pull", "--model", "tiny", "--space", str(space))
        notes = Notes()
        with pytest.raises(HubSourceError, match=message):
            follow_releases(load_space(space), notes.note)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"autotune: error: {result.stderr.strip().split(': ', 2)[2]}"]
    assert message in result.stderr
    assert not list(cache_dir.rglob("*.gguf")) and not list(cache_dir.rglob("blobs/*"))


def test_a_download_that_breaks_off_leaves_no_partial_file(tmp_path, tiny_dir, target_only, cache_dir, monkeypatch):
    space = write_space(tmp_path)
    with LocalHubEndpoint({REPO: HubRepo(C1, {"draft-A.gguf": draft_bytes(tiny_dir)})}, break_after=4096) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke("pull", "--model", "tiny", "--space", str(space))
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith(f"autotune: error: download of {REPO}/draft-A.gguf failed")
    assert sorted(p.name for p in target_only.iterdir()) == ["tiny-target.gguf"]  # the models dir is untouched
    assert [p for p in cache_dir.rglob("*") if p.is_file() and p.stat().st_size > 1000] == []  # no partial blob
    assert not list(cache_dir.rglob("*.incomplete")) and not list(cache_dir.rglob("snapshots/*/*"))
    assert resolve_model_files(load_space(space), target_only).drafts["draft-simple"] == ()


# --- the revision in trials, presets and exports


def test_the_revision_is_recorded_with_trials_presets_and_exports(
    tmp_path, tiny_dir, target_only, cache_dir, autotune_home
):
    write_hub_cache(cache_dir, REPO, C1, {"draft-A.gguf": draft_bytes(tiny_dir)})
    result = invoke(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(write_space(tmp_path)),
        "--models-dir",
        str(target_only),
        "--trials",
        "3",
        "--max-tokens",
        "8",
        "--per-category",
        "1",
        "--no-confirm",
        "--no-pruning",
    )
    assert result.exit_code == 0, result.output
    url = resolve_storage_url(None)
    (summary,) = optuna.get_all_study_summaries(url, include_best_trial=False)
    study = optuna.load_study(study_name=summary.study_name, storage=url)
    revision = {"repo": REPO, "revision": C1}
    speculative = [t for t in study.trials if t.user_attrs["config"]["spec_type"] == "draft-simple"]
    assert speculative and all(t.user_attrs["model_revisions"] == {"draft-A.gguf": revision} for t in speculative)
    assert study.trials[0].user_attrs["model_revisions"] == {}  # the target is a local file

    trial = next(t for t in speculative if t.state == optuna.trial.TrialState.COMPLETE)
    target = trial.user_attrs["config"]["target"]
    baseline = RacedConfig("none", "baseline", 0, target, ["none"], [10.0, 10.0], 10.0, (9.0, 11.0), None, 1.0)
    row = RacedConfig(
        "draft", "trial", trial.number, target, trial.user_attrs["argv"], [12.0, 12.0], 12.0, (11.0, 13.0), 0.01, 1.2
    )
    preset = preset_from(
        "tiny", study, confirmation=RaceVerdict("server", "b1", 2, "2026-12-03", [baseline], [row]), row=row
    )
    assert preset.file_revisions == {"draft-A.gguf": revision}
    with PresetStore(url) as store:
        store.save(preset)
        assert store.get("tiny", preset.hardware).file_revisions == {"draft-A.gguf": revision}
    (exported,) = json.loads(export_presets([preset], "json"))
    assert exported["file_revisions"] == {"draft-A.gguf": revision}
    assert f'"draft-A.gguf" = {{ "repo" = "{REPO}", "revision" = "{C1}" }}' in export_presets([preset], "toml")
    for fmt, comment in (("sh", "#"), ("llama-swap", "#"), ("ini", ";")):
        assert f"{comment} draft-A.gguf from {REPO} at {C1}\n" in export_presets([preset], fmt), fmt
    swap = yaml.safe_load(export_presets([preset], "llama-swap"))  # the comment leaves the file as it was
    assert list(swap["models"]["tiny"]) == ["description", "cmd"]
    shown = invoke("presets", "show", "--model", "tiny")
    assert f"draft-A.gguf sha256 {preset.file_hashes['draft-A.gguf']}, {REPO} at {C1}" in shown.stdout


# --- the nightly examples


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_nightly_examples_follow_ggml_orgs_qwen3_8b_conversions_with_real_options():
    space = load_space(EXAMPLES / "qwen3-8b-hub.toml")
    assert space.model.name == "qwen3-8b"
    # the files ggml-org/convert's models/qwen3-8b/convert.sh uploads to ggml-org/Qwen3-8B-GGUF
    assert [f.label for f in hub_files(space)] == [
        "ggml-org/Qwen3-8B-GGUF/Qwen3-8B-Q8_0.gguf",
        "ggml-org/Qwen3-8B-GGUF/dspark-Qwen3-8B-Q8_0.gguf",
        "ggml-org/Qwen3-8B-GGUF/dspark-Qwen3-8B-BF16.gguf",
        "ggml-org/Qwen3-8B-GGUF/dflash-Qwen3-8B-Q8_0.gguf",
        "ggml-org/Qwen3-8B-GGUF/dflash-Qwen3-8B-BF16.gguf",
    ]
    cron = [line for line in (EXAMPLES / "nightly.cron").read_text().splitlines() if line and line[0].isdigit()]
    service = [
        line.removeprefix("ExecStart=")
        for line in (EXAMPLES / "systemd" / "autotune-nightly.service").read_text().splitlines()
        if line.startswith("ExecStart=")
    ]
    for line in [cron[0].split(None, 5)[5].split(" >>")[0], *service]:
        words = shlex.split(line)
        assert Path(words[0]).name == "autotune" and words[1] == "nightly"
        context = cli.commands["nightly"].make_context("nightly", words[2:])  # every option exists
        assert context.params["model"] == "qwen3-8b" and [Path(p).name for p in context.params["space_file"]] == [
            "qwen3-8b-hub.toml"
        ]


def assert_revision_recorded(revision: str) -> None:
    """The night's draft-simple trials carry the hub draft's revision, and its preset the revisions of the
    files its command runs: the draft's where draft-simple won, none where --spec-default (target only) did."""
    url = resolve_storage_url(None)
    (summary,) = optuna.get_all_study_summaries(url, include_best_trial=False)
    trials = optuna.load_study(study_name=summary.study_name, storage=url).trials
    drafted = [t for t in trials if t.user_attrs.get("config", {}).get("spec_type") == "draft-simple"]
    recorded = {"draft-A.gguf": {"repo": REPO, "revision": revision}}
    assert drafted and all(t.user_attrs["model_revisions"] == recorded for t in drafted)
    (preset,) = json.loads(invoke("presets", "list", "--json").stdout)
    assert preset["file_revisions"] == (recorded if preset["params"]["spec_type"] == "draft-simple" else {})


@pytest.mark.slow
def test_an_offline_night_says_so_once_tunes_on_the_cached_release_and_records_it(
    tmp_path, tiny_dir, target_only, cache_dir, autotune_home, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_hub_cache(cache_dir, REPO, C1, {"draft-A.gguf": draft_bytes(tiny_dir)})
    space = write_space(tmp_path)  # draft-simple only, beside the --spec-default reference
    args = [
        "nightly",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(target_only),
        "--top",
        "2",
        "--race-budget",
        "2",
        "--max-tokens",
        "10",
        "--seed",
        "0",
    ]
    first = night(args, (0,))  # as a night with the hub: the first preset is made
    assert first.stdout.startswith("improved: tiny: first preset")
    hub_lines = [line for line in first.stderr.splitlines() if "hub" in line]
    assert hub_lines == [
        "autotune: hub not asked for new revisions: offline mode (HF_HUB_OFFLINE=1); going on with the files on disk"
    ]
    assert_revision_recorded(C1)
    second = night(args, (3,))
    assert "no new or changed model files" in second.stdout


@pytest.mark.slow
def test_nightly_notices_a_new_release_on_the_hub(
    tmp_path, tiny_dir, target_only, cache_dir, autotune_home, monkeypatch
):
    new_draft = tmp_path / "new-draft.gguf"
    tiny_gguf.write_qwen3_target(new_draft, seed=2)  # the next release: another compatible draft
    repos = {REPO: HubRepo(C1, {"draft-A.gguf": draft_bytes(tiny_dir)})}
    args = [
        "nightly",
        "--model",
        "tiny",
        "--space",
        str(write_space(tmp_path)),
        "--models-dir",
        str(target_only),
        "--top",
        "2",
        "--race-budget",
        "2",
        "--max-tokens",
        "10",
        "--seed",
        "0",
    ]
    url = resolve_storage_url(None)
    with LocalHubEndpoint(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first = night(args, (0,))
        assert (
            f"downloading {REPO}/draft-A.gguf (not in the cache, {format_size(len(draft_bytes(tiny_dir)))})"
            in first.stderr
        )
        assert_revision_recorded(C1)
        (made,) = json.loads(invoke("presets", "list", "--json").stdout)

        downloads = len([r for r in hub.requests if r.startswith("GET /org")])
        second = night(args, (3,))
        assert "no new or changed model files" in second.stdout
        assert len([r for r in hub.requests if r.startswith("GET /org")]) == downloads  # asked, not downloaded

        repos[REPO] = HubRepo(C2, {"draft-A.gguf": new_draft.read_bytes()})  # a new commit of the repo
        # The new draft races the preset: either may win (0, 3). 4 too: "regressed" compares the preset's tok/s
        # tonight with the first night's interval, absolute figures a neighbour's load on the box moves
        # between the nights. Each is checked below by what it must leave behind.
        third = night(args, (0, 3, 4))
        assert f"downloading {REPO}/draft-A.gguf (a new revision, " in third.stderr
    first_night, name = sorted(s.study_name for s in optuna.get_all_study_summaries(url, include_best_trial=False))
    assert name == f"{first_night}/v2"  # predicted anew, beside the first night's run
    study = optuna.load_study(study_name=name, storage=url)
    assert f"draft-simple:tiny-target.gguf + draft-A.gguf@{C2}" in study.user_attrs["files"]
    raced = study.user_attrs["confirmation"]["configs"]  # the new draft's best raced against the preset in use
    assert {c["role"] for c in raced} >= {"preset", "trial"}
    assert any(c["role"] == "trial" and "draft-A.gguf" in c["label"] for c in raced)
    assert "the best predicted with the new draft-A.gguf" in third.stderr
    (preset,) = json.loads(invoke("presets", "list", "--json").stdout)
    if third.exit_code == 0:  # replaced, by a configuration of tonight's study
        assert preset["study_name"] == name
    else:  # kept; a regression is the preset's own configuration measured below its recorded interval
        assert preset == made
        current = next(c for c in raced if c["role"] == "preset")
        assert third.exit_code == 3 or current["ci95"][1] < made["ci95_low"]
    if preset["params"]["spec_type"] == "draft-simple":  # else --spec-default won: its command runs no hub file
        assert preset["file_revisions"]["draft-A.gguf"]["revision"] == (C2 if third.exit_code == 0 else C1)
    else:
        assert preset["file_revisions"] == {}
