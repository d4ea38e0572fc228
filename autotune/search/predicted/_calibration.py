"""Step 4 of a predicted search (autotune.search.predicted): the references each target's cost factors are
fitted to, measured on the arbiter for as many prompts as their fit needs, not for a whole mix each.

The references (the baseline, `--spec-default`, one configuration per family) run prompt by prompt in
one shuffled order, back to back on servers loaded together, as the race runs (autotune.race.rounds).
What the fit takes from a reference is its level against the in-process prediction: each prompt's
measured decode time over its predicted one (under the baseline-only calibration). A reference leaves,
after at least `MIN_FIT_PROMPTS` prompts, once the mean log of that ratio is known to `FIT_PRECISION`
(standard error), once it is proven slower than the plain command (its speedup's upper bound below 1 at
the race's level: a slow reference costs the most time a prompt, and its family's fit is already
pinned), or at the latest after `MAX_FIT_PROMPTS` prompts; the baseline once every other reference has
left. A reference whose ratio is steady (a self-draft at 0.07x costs the same per token on every
prompt) so leaves after 3 prompts instead of costing a whole mix at its pace; one whose ratio moves with
the prompt, or with a busy neighbour, is measured on more, never on more than MAX_FIT_PROMPTS: the round
is at most that many prompts of the mix, spread over its categories (`calibration_prompts`). Where the
servers do not fit together, every reference runs those prompts once, one at a time.
"""

from __future__ import annotations

import math
import random
from contextlib import closing
from typing import Callable

import numpy as np

from autotune.engines import Engine
from autotune.llamacpp.runnable import CommandCheck
from autotune.measure.prompts import PromptMix
from autotune.measure.sequential import ALPHA
from autotune.race.entrants import Entrant, speedup_of
from autotune.race.rounds import Rounds
from autotune.search.plan import MAX_FIT_PROMPTS
from autotune.search.predicted._space import Replayed, family_references
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config
from autotune.spec.types import family_of
from autotune.study.records import BASELINE_ROLE, SPEC_DEFAULT_ROLE

#: the standard error of a reference's mean log(measured / predicted) at which its fit has what it needs
FIT_PRECISION = 0.02
#: the fewest prompts a reference leaves after (a standard error of fewer is not worth trusting); the most is
#: the plan's MAX_FIT_PROMPTS
MIN_FIT_PROMPTS = 3


def calibrate(
    targets: dict,
    replayed: list[Replayed],
    engine: Engine,
    mix: PromptMix,
    *,
    max_tokens: int,
    command: ServerCommand,
    runs: CommandCheck | None,
    with_spec_default: bool,
    note: Callable[[str], None],
    seed: int = 0,
) -> list[Entrant]:
    """Measure the references on `engine` (the arbiter) and fit each target's factors to them (module
    docstring); returns the references with what they measured. `runs`: only references whose command
    that llama-server runs."""
    defaults = [spec_default_config(t) for t in targets] if with_spec_default else []
    chosen = family_references(replayed, targets, runs, command, {c.describe() for c in defaults})
    entrants = [Entrant(BASELINE_ROLE, None, SpecConfig(t)) for t in targets]
    entrants += [Entrant(SPEC_DEFAULT_ROLE, None, c, family_of(c.spec_type)) for c in defaults]
    entrants += [Entrant("anchor", None, c, family_of(c.spec_type)) for c in chosen]
    note(
        f"calibrating on the {engine.name} engine with {len(entrants)} references, each for as many prompts as its "
        "fit needs: " + "; ".join(f"{e.label} ({e.family or 'the baseline'})" for e in entrants)
    )
    pairing = _measure_references(engine, entrants, targets, mix, max_tokens=max_tokens, command=command, seed=seed)
    for entrant in entrants:
        if not as_predicted(entrant, targets):
            note(f"calibration: {entrant.label} left out: {entrant.failure}")
        elif not entrant.is_baseline:
            speedup = speedup_of(entrant, entrants, "mix_tok_s", pairing)
            low, high = speedup.interval()
            why = entrant.dropped if entrant.failure is None else f"{entrant.failure}, as predicted"
            note(
                f"calibration: {entrant.label}: {_prompts_measured(entrant)} prompts, {speedup.ratio:.2f}x "
                f"[{low:.2f}-{high:.2f}] the baseline" + (f"; {why}" if why else "")
            )
    for target, model in targets.items():
        calibration = model.calibrate(fit_inputs(entrants, targets, mix, target))
        note(
            f"cost model of {target.name} on the {engine.name} engine: x{calibration.scale:.2f} the target's "
            f"in-process time, {calibration.per_step_ms:.2f} ms a step, {calibration.per_row_ms:.3f} ms a verified "
            "draft token"
            + _scale_note("draft model", calibration.draft_scale)
            + _scale_note("block draft", calibration.block_scale)
            + f"; {calibration.error or 0:.1%} off its {calibration.configurations} references (in sample)"
        )
    return entrants


def fit_inputs(entrants: list[Entrant], targets: dict, mix: PromptMix, target) -> list[tuple]:
    """(configuration, each prompt's decode ms, nan where not measured) of `target`'s entrants a fit may use."""
    found = []
    for entrant in entrants:
        if entrant.config.target == target and as_predicted(entrant, targets):
            times = entrant.prompt_decode_ms(mix, partial=True)
            if not all(math.isnan(t) for t in times):
                found.append((entrant.config, times))
    return found


def as_predicted(entrant: Entrant, targets: dict) -> bool:
    """Whether `entrant` measured what was predicted of it, so that a calibration may fit it: it measured
    and nothing failed, or it drafted nothing where the replay drafts nothing too (an n-gram draft that
    finds no match: llama-server's "speculation inactive" is then the prediction come true)."""
    measured = any(m.results for m in entrant.rounds)
    if not measured or entrant.failure is None:
        return measured
    drafted = targets[entrant.config.target].replay(entrant.config)[0].drafted
    return sum(m.n_drafted for m in entrant.rounds) == 0 and drafted == 0


def _measure_references(
    engine: Engine,
    entrants: list[Entrant],
    targets: dict,
    mix: PromptMix,
    *,
    max_tokens: int,
    command: ServerCommand,
    seed: int,
) -> str:
    """One round of the references, each leaving once its fit has enough (module docstring); the pairing."""
    predicted = {id(e): targets[e.config.target].prediction(e.config).decode_ms for e in entrants if not e.is_baseline}
    index = {p.id: i for i, p in enumerate(mix)}
    rounds = Rounds(
        engine, entrants, calibration_prompts(mix, seed), max_tokens, command, "mix_tok_s", lambda e: None, seed=seed
    )
    with closing(rounds.looks()) as looks:
        for _ in looks:
            for entrant in rounds.entrants:
                if entrant.in_race and not entrant.is_baseline:
                    enough = _fit_has_enough(entrant, predicted[id(entrant)], index, rounds)
                    if enough is not None:
                        rounds.drop(entrant, enough)
            if rounds.passes or all(e.is_baseline for e in rounds.entrants if e.in_race):
                break
    return rounds.pairing


def _fit_has_enough(
    entrant: Entrant, predicted_ms: tuple[float, ...], index: dict[str, int], rounds: Rounds
) -> str | None:
    """Why `entrant`'s measurements are all its fit needs (None: not yet; module docstring)."""
    logs = [
        math.log(r.decode_ms / predicted_ms[index[r.prompt_id]])
        for m in entrant.rounds
        for r in m.results
        if r.decode_ms > 0 and predicted_ms[index[r.prompt_id]] > 0
    ]
    if len(logs) < MIN_FIT_PROMPTS:
        return None
    error = float(np.std(logs, ddof=1) / math.sqrt(len(logs)))
    level = f"measured {math.exp(float(np.mean(logs))):.2f}x its in-process prediction's time, ±{error:.1%}"
    if error <= FIT_PRECISION:
        return f"enough for its fit ({level})"
    upper = speedup_of(entrant, rounds.entrants, "mix_tok_s", rounds.pairing).upper_bound(ALPHA)
    if upper < 1.0:
        return f"proven slower than the plain command (at most {upper:.2f}x) after {len(logs)} prompts ({level})"
    if len(logs) >= MAX_FIT_PROMPTS:
        return f"measured on {len(logs)} prompts, the most a reference takes ({level})"
    return None


def calibration_prompts(mix: PromptMix, seed: int) -> PromptMix:
    """At most MAX_FIT_PROMPTS prompts of `mix`, spread over its categories: each category's first prompt
    before any category's second, the categories and prompts in an order shuffled from `seed`."""
    return PromptMix(mix.source, tuple(mix.prompts[i] for i in mix.spread(random.Random(seed))[:MAX_FIT_PROMPTS]))


def _prompts_measured(entrant: Entrant) -> int:
    return sum(len(m.results) for m in entrant.rounds)


def _scale_note(family: str, scale: float | None) -> str:
    return "" if scale is None else f", x{scale:.2f} the {family}'s"
