"""Does a search's plan hold? Each search here runs `autotune search ... --plan` first, then the search
itself in a fresh AUTOTUNE_HOME, and prints, per phase and in all, the seconds and counts the plan said
against the ledger's (`best --json`'s `cost`): the ratio ledger / plan must stay at most 1.

    python examples/benchmarks/plan_vs_ledger.py [--searches demo,held-out,long] [--keep DIR]

demo: README's demo, `search --model gemma3-270m`. held-out: the same model on examples/prompts-support.jsonl,
a mix the demo never saw. long: the qwen3-8b workload's shape at Gemma's pace, 512 tokens, 4 prompts a
category, within `--budget 20m`. Run it on an otherwise idle machine: the plan is priced at the pace its
first prompt measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEARCHES = {
    "demo": ["--model", "gemma3-270m"],
    "held-out": ["--model", "gemma3-270m", "--prompts", str(REPO / "examples" / "prompts-support.jsonl")],
    "long": ["--model", "gemma3-270m", "--max-tokens", "512", "--per-category", "4", "--budget", "20m"],
}
ROW = re.compile(r"\s+(.+?)\s+([\d,]+) tokens\s+([\d,]+) decodes\s+(\d+) server starts\s+≤?\s*([\d.]+) min")


def autotune(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "AUTOTUNE_HOME": str(home)},
        check=False,
    )


def planned(output: str) -> dict[str, dict[str, float]]:
    rows = {}
    for line in output.splitlines():
        match = ROW.match(line)
        if match:
            tokens, decodes, starts, minutes = (float(g.replace(",", "")) for g in match.groups()[1:])
            rows[match.group(1)] = {
                "tokens": tokens,
                "decodes": decodes,
                "server_starts": starts,
                "seconds": minutes * 60,
            }
    return rows


def one(name: str, args: list[str], home: Path) -> dict:
    plan = autotune(home, "search", *args, "--plan")
    if plan.returncode != 0:
        raise SystemExit(f"{name}: --plan failed: {plan.stderr.strip().splitlines()[-1]}")
    started = time.monotonic()
    searched = autotune(home, "search", *args)
    wall = time.monotonic() - started
    if searched.returncode != 0:
        raise SystemExit(f"{name}: the search failed: {searched.stderr.strip().splitlines()[-1]}")
    cost = json.loads(autotune(home, "best", "--model", "gemma3-270m", "--json").stdout)["cost"]
    return {"plan": planned(plan.stdout), "cost": cost, "wall_s": wall, "verdict": searched.stdout.splitlines()[1:2]}


def report(name: str, found: dict) -> None:
    plan, cost = found["plan"], found["cost"]
    print(f"{name}: wall {found['wall_s']:.0f} s; {' '.join(found['verdict'])}")
    print(f"  {'phase':<12} {'plan s':>8} {'ledger s':>9} {'ratio':>6}   tokens ledger/plan   starts ledger/plan")
    for phase in dict.fromkeys([*plan, *cost]):
        p, c = plan.get(phase, {}), cost.get(phase, {})
        ratio = c.get("seconds", 0) / p["seconds"] if p.get("seconds") else float("nan")
        print(
            f"  {phase:<12} {p.get('seconds', 0):8.0f} {c.get('seconds', 0):9.0f} {ratio:6.2f}   "
            f"{c.get('tokens', 0):>7,.0f}/{p.get('tokens', 0):<8,.0f}   {c.get('server_starts', 0):>3.0f}/"
            f"{p.get('server_starts', 0):<3.0f}"
        )
    total_plan = sum(p["seconds"] for p in plan.values())
    total_cost = sum(c["seconds"] for c in cost.values())
    print(f"  {'total':<12} {total_plan:8.0f} {total_cost:9.0f} {total_cost / total_plan:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", default="demo,held-out,long")
    parser.add_argument("--keep", type=Path, help="keep each search's AUTOTUNE_HOME under this folder")
    args = parser.parse_args()
    for name in args.searches.split(","):
        home = (args.keep / name) if args.keep else Path(tempfile.mkdtemp(prefix=f"plan-{name}-"))
        home.mkdir(parents=True, exist_ok=True)
        report(name, one(name, SEARCHES[name], home))


if __name__ == "__main__":
    main()
