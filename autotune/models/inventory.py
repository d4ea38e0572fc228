"""What `autotune models` reports: per known model, the files found, what can run and why the rest cannot."""

from __future__ import annotations

from pathlib import Path

from autotune.engines.coverage import engine_coverage
from autotune.errors import ModelFileError
from autotune.gguf.info import read_gguf_info
from autotune.llamacpp.capabilities import ServerCapabilities
from autotune.models.candidates import find_candidates
from autotune.models.files import resolve_model_files
from autotune.spec.space import SearchSpace
from autotune.spec.types import DRAFT_MODEL_TYPES


def model_inventory(space: SearchSpace, models_dir: Path, server: ServerCapabilities | None) -> dict:
    """A JSON-ready report of one model: files (arch, quant), runnable combinations, refusals, notes."""
    model = space.model
    coverage = engine_coverage(server)
    report: dict = {
        "model": model.name,
        "description": model.description,
        "models_dir": str(models_dir),
        "files": [],
        "missing": [],
        "runnable": [],
        "refused": [],
        "notes": [],
        "engines": {t: coverage[t] for t in space.spec_types if t in coverage},
    }
    try:
        files = resolve_model_files(space, models_dir, write_demo=False)
    except ModelFileError as exc:
        report["notes"].append(str(exc))
        return report
    candidates = find_candidates(files)
    roles: dict[Path, list[str]] = {path: ["target"] for path in files.targets}
    for spec_type, drafts in files.drafts.items():
        for path in drafts:
            roles.setdefault(path, []).append(f"{spec_type} draft")
    for path, role in roles.items():
        info = read_gguf_info(path)
        report["files"].append(
            {"path": str(path), "roles": role, "architecture": info.architecture, "quant": info.quant}
        )
    report["missing"] = list(files.missing)
    for spec_type in space.spec_types:
        if spec_type in DRAFT_MODEL_TYPES:
            pairs = candidates.pairs.get(spec_type, ())
            report["runnable"] += [{"spec_type": spec_type, "target": t.name, "draft": d.name} for t, d in pairs]
        else:
            report["runnable"] += [{"spec_type": spec_type, "target": t.name, "draft": None} for t in files.targets]
    report["refused"] = [
        {"spec_type": r.spec_type, "target": r.target.name, "draft": r.draft.name, "reason": r.reason}
        for r in candidates.refused
    ]
    report["notes"] += _server_notes(space, server)
    return report


def _server_notes(space: SearchSpace, server: ServerCapabilities | None) -> list[str]:
    if server is None:
        return [
            "no llama-server found: --engine server and `autotune confirm` need one (pip install 'autotune[server]')"
        ]
    notes = []
    missing_types = sorted(t for t in space.spec_types if not server.runs(t))
    if missing_types:
        notes.append(f"this llama-server cannot run {', '.join(missing_types)}")
    wants_pctree = any(r.param.name.startswith("dspark_pctree") for r in space.spec_types.get("draft-dspark", ()))
    if wants_pctree and not server.has_pctree:
        notes.append(
            "this llama-server has no PCTree flags (--spec-dspark-pctree, a community fork's): "
            "--engine server searches draft-dspark without trees (--engine python runs them)"
        )
    return notes
