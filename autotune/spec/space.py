"""Search-space files: one declarative TOML file per model family (see README, "Search-space files").

Parsing is strict: an unknown key, a wrong type or an empty range raises SearchSpaceError naming
the file, the key and the problem, before anything is measured or written.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from autotune.errors import SearchSpaceError, UnknownModelError
from autotune.spec.duration import duration_s
from autotune.spec.params import SpecParam
from autotune.spec.runtime_flags import DRAFT_NGL_WORDS, RUNTIME_PARAMS
from autotune.spec.types import (
    DRAFT_MODEL_TYPES,
    SPEC_TYPE_PARAMS,
    combined_spec_type,
    draft_member,
    is_combination,
    spec_members,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: A draft file pattern meaning "the target file is its own draft".
DRAFT_IS_TARGET = "target"
#: Placeholder in a file pattern for the quantization name (matched case-insensitively).
QUANT_PLACEHOLDER = "{quant}"


@dataclass(frozen=True)
class ParamRange:
    """The values a study may pick for one parameter: fixed (low == high), an inclusive range, or
    (a `str` parameter) some of its choices."""

    param: SpecParam
    low: int | float | str
    high: int | float | str
    step: int | float | None = None
    choices: tuple[str, ...] = ()

    @property
    def is_fixed(self) -> bool:
        return self.low == self.high if not self.choices else len(self.choices) == 1


@dataclass(frozen=True)
class HubSource:
    """Where a table's files come from on the Hugging Face Hub: a repo and, optionally, a pinned revision
    (a branch, tag or commit hash; the repo's default branch when unset). See autotune.models.hub."""

    repo: str
    revision: str | None = None


@dataclass(frozen=True)
class FilePattern:
    """Files of one role: a glob under the models dir, with `{quant}` standing for each of `quants`;
    with a `source`, file names in that hub repo (found in the hub cache first, then the models dir)."""

    pattern: str
    quants: tuple[str, ...] = ()
    source: HubSource | None = None

    def patterns(self) -> list[tuple[str | None, str]]:
        """(quant, glob) pairs to look for."""
        if QUANT_PLACEHOLDER in self.pattern and self.quants:
            return [(q, self.pattern.replace(QUANT_PLACEHOLDER, q)) for q in self.quants]
        return [(None, self.pattern.replace(QUANT_PLACEHOLDER, "*"))]


@dataclass(frozen=True)
class ModelSection:
    """The `[model]` table: which files make up the model and how llama-server runs it."""

    name: str
    target: str
    description: str = ""
    demo_package: str | None = None
    quants: tuple[str, ...] = ()
    draft: str | None = None
    context_size: int = 4096
    base_flags: tuple[str, ...] = ()
    hf: str | None = None  # the targets' hub repo
    revision: str | None = None  # pinned revision of `hf`
    #: the first target's plain decode tok/s on the hardware the space was written for: the pace `search --plan`
    #: prices at where no target is on disk to measure yet
    plan_tok_s: float | None = None
    #: what a search of this space may take a target where the user gives no --budget (`15m`; None: no cap)
    budget_per_target: str | None = None

    @property
    def targets(self) -> FilePattern:
        return FilePattern(self.target, self.quants, HubSource(self.hf, self.revision) if self.hf else None)


@dataclass(frozen=True)
class SearchSpace:
    """A parsed search-space file."""

    path: Path
    model: ModelSection
    spec_types: dict[str, tuple[ParamRange, ...]] = field(default_factory=dict)
    #: per draft type, its file tables (`[drafts.<type>]`, or several as `[[drafts.<type>]]`: draft sizes from
    #: different repos)
    drafts: dict[str, tuple[FilePattern, ...]] = field(default_factory=dict)
    #: the `[runtime]` table: llama-server runtime flags searched with the spec parameters
    runtime: tuple[ParamRange, ...] = ()

    def draft_files(self, spec_type: str) -> tuple[FilePattern, ...]:
        """Where the drafts of a draft-* spec type (or of a combination's draft member) are: its
        [drafts.<type>] tables, else model.draft (none: an empty tuple)."""
        spec_type = draft_member(spec_type) or spec_type
        if spec_type in self.drafts:
            return self.drafts[spec_type]
        return (FilePattern(self.model.draft),) if self.model.draft else ()

    def restricted_to(self, runnable: set[str]) -> "SearchSpace":
        """The same space without the spec types an engine cannot run."""
        kept = {t: r for t, r in self.spec_types.items() if t in runnable}
        return replace(self, spec_types=kept)

    def without_params(self, dropped: Callable[[SpecParam], bool]) -> "SearchSpace":
        """The same space without the parameters `dropped` picks (those an engine cannot set)."""
        kept = {t: tuple(r for r in ranges if not dropped(r.param)) for t, ranges in self.spec_types.items()}
        return replace(self, spec_types=kept)


_MODEL_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "target": str,
    "description": str,
    "demo_package": str,
    "quants": list,
    "draft": str,
    "context_size": int,
    "base_flags": list,
    "hf": str,
    "revision": str,
    "plan_tok_s": (int, float),
    "budget_per_target": str,
}
#: Keys of a [drafts.<type>] table.
_DRAFT_KEYS = ("file", "quants", "hf", "revision")
#: A hub repo id as huggingface_hub accepts it: owner/name, no "--" or "..".
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_GLOB_CHARS = "*?["
_REQUIRED_MODEL_KEYS = ("name", "target")


def bundled_space_dir() -> Path:
    return Path(str(resources.files("search_spaces")))


def known_models() -> list[str]:
    return sorted(p.stem for p in bundled_space_dir().glob("*.toml"))


def find_space_file(model: str) -> Path:
    """The bundled search-space file of a model name."""
    path = bundled_space_dir() / f"{model}.toml"
    if not path.is_file():
        raise UnknownModelError(
            f"unknown model {model!r}: known models are {', '.join(known_models())} "
            "(or pass --space FILE with your own search-space file)"
        )
    return path


def load_space(path: Path) -> SearchSpace:
    """Parse and validate one search-space file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SearchSpaceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SearchSpaceError(f"{path}: not valid TOML: {exc}") from exc
    return parse_space(path, data)


def parse_space(path: Path, data: dict[str, Any]) -> SearchSpace:
    """Validate the tables of a search space (read from `path`, or built for an ad-hoc model)."""
    return _SpaceParser(path).parse(data)


class _SpaceParser:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, problem: str) -> SearchSpaceError:
        return SearchSpaceError(f"{self.path}: {key}: {problem}")

    def parse(self, data: dict[str, Any]) -> SearchSpace:
        for key in data:
            if key not in ("model", "drafts", "spec_types", "runtime"):
                raise self.fail(key, "unknown key (expected [model], [drafts.*], [spec_types.*] and [runtime])")
        model = self.parse_model(data.get("model"))
        spec_types = data.get("spec_types")
        if not isinstance(spec_types, dict) or not spec_types:
            raise self.fail("spec_types", "missing or empty: list at least one [spec_types.<type>] table")
        singles = {name: table for name, table in spec_types.items() if "," not in name}
        parsed = {name: self.parse_spec_type(name, table) for name, table in singles.items()}
        for name, table in spec_types.items():
            if "," in name:
                canonical, ranges = self.parse_combination(name, table, parsed)
                parsed[canonical] = ranges
        drafts = self.parse_drafts(data.get("drafts", {}))
        for name in parsed:
            drafted = draft_member(name)
            if drafted is not None and drafted not in drafts and model.draft is None:
                raise self.fail(f"spec_types.{name}", f"needs a draft file: add [drafts.{drafted}] or model.draft")
        runtime = self.parse_runtime(data.get("runtime", {}), model)
        return SearchSpace(self.path, model, parsed, drafts, runtime)

    def parse_runtime(self, table: Any, model: ModelSection) -> tuple[ParamRange, ...]:
        """The `[runtime]` table: llama-server runtime flags (autotune.spec.runtime_flags) in the same forms as
        spec parameters (a value, [low, high], [low, high, step], or a list of choices). A flag that
        `base_flags` already sets would be set twice: refused."""
        if not isinstance(table, dict):
            raise self.fail("runtime", "expected a table of runtime settings")
        ranges = []
        for name, value in table.items():
            key = f"runtime.{name}"
            param = RUNTIME_PARAMS.get(name)
            if param is None:
                raise self.fail(key, f"unknown runtime setting (known: {', '.join(RUNTIME_PARAMS)})")
            if param.spelling in model.base_flags or (param.negative and param.negative in model.base_flags):
                raise self.fail(key, f"model.base_flags already sets {param.spelling}")
            if name == "draft_ngl":  # a layer count, "auto" or "all": choices spelled as strings
                values = value if isinstance(value, list) else [value]
                if not values or any(
                    isinstance(v, bool) or not (isinstance(v, int) and v >= 0 or v in DRAFT_NGL_WORDS) for v in values
                ):
                    raise self.fail(key, f"expected layer counts or {' / '.join(DRAFT_NGL_WORDS)}, got {value!r}")
                choices = tuple(dict.fromkeys(str(v) for v in values))
                ranges.append(ParamRange(param, choices[0], choices[-1], choices=choices))
                continue
            parsed = self.parse_range(key, param, value)
            if param.kind is int and parsed.low < 1:
                raise self.fail(key, f"must be at least 1, got {parsed.low}")
            ranges.append(parsed)
        return tuple(ranges)

    def parse_drafts(self, table: Any) -> dict[str, tuple[FilePattern, ...]]:
        if not isinstance(table, dict):
            raise self.fail("drafts", "expected [drafts.<spec type>] tables")
        drafts = {}
        for name, entry in table.items():
            key = f"drafts.{name}"
            if is_combination(name):
                raise self.fail(key, f"drafts are given per draft type: [drafts.{draft_member(name) or 'draft-...'}]")
            if name not in DRAFT_MODEL_TYPES:
                raise self.fail(key, f"not a draft spec type (known: {', '.join(sorted(DRAFT_MODEL_TYPES))})")
            entries = entry if isinstance(entry, list) and entry else [entry]
            drafts[name] = tuple(
                self.parse_draft_table(f"{key}[{i}]" if len(entries) > 1 else key, e) for i, e in enumerate(entries)
            )
        return drafts

    def parse_draft_table(self, key: str, entry: Any) -> FilePattern:
        """One `[drafts.<type>]` table (or one entry of `[[drafts.<type>]]`): file, quants, hf, revision."""
        if not isinstance(entry, dict):
            raise self.fail(key, "expected a table with file and quants")
        for sub in entry:
            if sub not in _DRAFT_KEYS:
                raise self.fail(f"{key}.{sub}", f"unknown key (known: {', '.join(_DRAFT_KEYS)})")
        if not isinstance(entry.get("file"), str):
            raise self.fail(f"{key}.file", 'required string (a glob, or "target")')
        quants = self.parse_quants(f"{key}.quants", entry.get("quants", []))
        source = self.parse_source(key, "file", entry["file"], quants, entry)
        return FilePattern(entry["file"], quants, source)

    def parse_source(
        self, key: str, file_key: str, pattern: str, quants: tuple[str, ...], table: dict[str, Any]
    ) -> HubSource | None:
        """The table's `hf` and `revision`: a hub repo names exact files (`{quant}` the only wildcard)."""
        repo, revision = table.get("hf"), table.get("revision")
        for sub, value in (("hf", repo), ("revision", revision)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise self.fail(f"{key}.{sub}", f"expected a non-empty string, got {value!r}")
        if repo is None:
            if revision is not None:
                raise self.fail(f"{key}.revision", 'needs hf = "org/repo" beside it')
            return None
        if not _REPO_ID.match(repo) or "--" in repo or ".." in repo:
            raise self.fail(f"{key}.hf", f'expected a hub repo id such as "org/repo", got {repo!r}')
        if pattern == DRAFT_IS_TARGET or any(c in pattern for c in _GLOB_CHARS):
            raise self.fail(
                f"{key}.{file_key}",
                f"with hf, a file name in the repo ({QUANT_PLACEHOLDER} the only wildcard), got {pattern!r}",
            )
        if QUANT_PLACEHOLDER in pattern and not quants:
            raise self.fail(
                f"{key}.quants", f"with hf, {QUANT_PLACEHOLDER} in {pattern!r} needs the quants to download"
            )
        return HubSource(repo, revision)

    def parse_quants(self, key: str, quants: Any) -> tuple[str, ...]:
        if not isinstance(quants, list) or not all(isinstance(q, str) and q for q in quants):
            raise self.fail(key, 'expected a list of quantization names such as ["Q4_K_M", "Q8_0"]')
        return tuple(quants)

    def parse_model(self, table: Any) -> ModelSection:
        if not isinstance(table, dict):
            raise self.fail("model", "missing [model] table")
        for key, value in table.items():
            expected = _MODEL_KEYS.get(key)
            if expected is None:
                raise self.fail(f"model.{key}", f"unknown key (known: {', '.join(_MODEL_KEYS)})")
            if not isinstance(value, expected) or isinstance(value, bool):
                names = " or ".join(e.__name__ for e in (expected if isinstance(expected, tuple) else (expected,)))
                raise self.fail(f"model.{key}", f"expected {names}, got {type(value).__name__}")
        for key in _REQUIRED_MODEL_KEYS:
            if key not in table:
                raise self.fail(f"model.{key}", "required key is missing")
        for key in ("context_size", "plan_tok_s"):
            if table.get(key, 1) <= 0:
                raise self.fail(f"model.{key}", "must be positive")
        if "budget_per_target" in table and duration_s(table["budget_per_target"]) is None:
            raise self.fail("model.budget_per_target", 'expected a duration such as "15m", "1h" or "900s"')
        flags = table.get("base_flags", [])
        if not all(isinstance(f, str) for f in flags):
            raise self.fail("model.base_flags", "expected a list of strings")
        quants = self.parse_quants("model.quants", table.get("quants", []))
        self.parse_source("model", "target", table["target"], quants, table)
        return ModelSection(**{**table, "base_flags": tuple(flags), "quants": quants})

    def parse_spec_type(self, name: str, table: Any, label: str | None = None) -> tuple[ParamRange, ...]:
        key = label or f"spec_types.{name}"
        params = SPEC_TYPE_PARAMS.get(name)
        if params is None:
            raise self.fail(key, f"unknown spec type (known: {', '.join(SPEC_TYPE_PARAMS)})")
        if not isinstance(table, dict):
            raise self.fail(key, "expected a table")
        ranges = []
        for param_name, value in table.items():
            param = params.get(param_name)
            if param is None:
                known = ", ".join(params) or "none"
                raise self.fail(f"{key}.{param_name}", f"unknown parameter (known: {known})")
            ranges.append(self.parse_range(f"{key}.{param_name}", param, value))
        return tuple(ranges)

    def parse_combination(
        self, name: str, table: Any, singles: dict[str, tuple[ParamRange, ...]]
    ) -> tuple[str, tuple[ParamRange, ...]]:
        """`[spec_types."draft-simple,ngram-mod"]`: llama-server's `--spec-type a,b`. Each member's
        parameters take the ranges of that member's own table where the file has one, and the
        combination's table may set any of them anew; a key no member has is refused."""
        key = f'spec_types."{name}"'
        try:
            canonical = combined_spec_type(name)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None
        if canonical in singles:
            raise self.fail(key, f"the combination {canonical} is listed twice")
        inherited = {r.param.name: r for member in spec_members(canonical) for r in singles.get(member, ())}
        own = {r.param.name: r for r in self.parse_spec_type(canonical, table, label=key)}
        return canonical, tuple({**inherited, **own}.values())

    def parse_range(self, key: str, param: SpecParam, value: Any) -> ParamRange:
        values = value if isinstance(value, list) else [value]
        if param.kind is str:
            if not values or any(v not in param.choices for v in values):
                raise self.fail(key, f"expected one or more of {', '.join(map(repr, param.choices))}, got {value!r}")
            choices = tuple(dict.fromkeys(values))
            return ParamRange(param, choices[0], choices[-1], choices=choices)
        if not 1 <= len(values) <= 3 or (isinstance(value, list) and len(values) == 1):
            raise self.fail(key, "expected a value, [low, high] or [low, high, step]")
        allowed = {int: (int,), float: (int, float), bool: (bool,)}[param.kind]
        for v in values:
            if isinstance(v, bool) != (param.kind is bool) or not isinstance(v, allowed):
                raise self.fail(key, f"expected {param.kind.__name__} values, got {v!r}")
        low, high = values[0], values[-1] if len(values) == 1 else values[1]
        step = values[2] if len(values) == 3 else None
        if low > high:
            raise self.fail(key, f"empty range: low {low} is above high {high}")
        if low < 0:
            raise self.fail(key, f"must not be negative, got {low}")
        if param.minimum is not None and low < param.minimum:
            raise self.fail(key, f"llama-server accepts {param.minimum} or more, got {low}")
        if param.maximum is not None and high > param.maximum:
            raise self.fail(key, f"llama-server accepts at most {param.maximum}, got {high}")
        if step is not None and step <= 0:
            raise self.fail(key, f"step must be positive, got {step}")
        return ParamRange(param, param.kind(low), param.kind(high), None if step is None else param.kind(step))


def load_model_space(model: str, space_file: Path | None = None) -> SearchSpace:
    """The space of `model`: `space_file`, else its bundled file; a file naming another model is refused."""
    space = load_space(space_file or find_space_file(model))
    if space.model.name != model:
        raise SearchSpaceError(f"{space.path}: model.name is {space.model.name!r}, but --model is {model!r}")
    return space
