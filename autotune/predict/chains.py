"""draft-simple without re-running the draft model per configuration: the draft's greedy chain at every
position of every trajectory, with the top-1 probability of each token, recorded once per draft file.

A draft-simple draft at a position is a cut of that chain: tokens while their probability reaches
`p_min`, at most `n_max` (and the room left), none if fewer than `n_min` — what `DraftModelDrafter`
drafts, read from the same model with the same top-k sampler. While the trajectory follows the
chain, the next position's chain is the same chain one token on, so recording costs about one draft
decode per position (plus a chain's length where the trajectory parts from it).

The chain is decoded one token at a time; the in-process drafter decodes the same tokens in the
target's verify batches. Their logits differ in the last bits, which can flip a draft at a near-tie.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.engines.drafters.base import Drafter
from autotune.engines.drafters.draft_model import top_k_probability
from autotune.engines.sampler import SamplerChain
from autotune.llamacpp.bindings import Context
from autotune.predict.trajectory import Trajectories
from autotune.spec.config import SpecConfig
from autotune.spec.space import SearchSpace

#: one position's chain: the drafted tokens and each one's top-k probability
Chain = tuple[tuple[int, ...], tuple[float, ...]]


@dataclass
class DraftChains:
    """Per prompt (by its token ids), the chain at each trajectory position."""

    length: int
    chains: dict[tuple[int, ...], list[Chain]] = field(default_factory=dict)
    draft_decodes: int = 0  # what recording cost

    @classmethod
    def record(cls, context: Context, sampler: SamplerChain, trajectories: Trajectories, length: int) -> "DraftChains":
        """Walk every trajectory through the draft model, keeping `length` tokens of chain per position."""
        found = cls(length)
        for trajectory in trajectories.prompts:
            prompt = list(trajectory.prompt_tokens)
            found.chains[tuple(prompt)] = found._walk(context, sampler, prompt, list(trajectory.tokens))
        return found

    def _walk(self, context: Context, sampler: SamplerChain, prompt: list[int], tokens: list[int]) -> list[Chain]:
        context.clear()
        context.decode(prompt, 0)
        chains: list[Chain] = []
        chain: list[int] = []
        probs: list[float] = []
        next_position = len(prompt)  # where the draft's next decode goes
        for p, last in enumerate(tokens):
            position = len(prompt) + p
            if chain and chain[0] == last:  # the trajectory follows the chain: `last` is in the cache already
                chain, probs = chain[1:], probs[1:]
            else:
                context.truncate(position)
                chain, probs, next_position = [], [], position
            if not chain:
                self._extend(context, sampler, last, next_position, chain, probs)
                next_position += 1
            while len(chain) < self.length:
                self._extend(context, sampler, chain[-1], next_position, chain, probs)
                next_position += 1
            chains.append((tuple(chain), tuple(probs)))
        return chains

    def _extend(
        self, context: Context, sampler: SamplerChain, token: int, position: int, chain: list[int], probs: list[float]
    ) -> None:
        """Decode `token` at `position`; the draft's next token and its probability join the chain."""
        row = context.decode([token], position)[-1]
        self.draft_decodes += 1
        chain.append(sampler.sample(context, -1))
        probs.append(float(top_k_probability(row)))

    def drafter(self, config: SpecConfig) -> "ChainCutDrafter":
        return ChainCutDrafter(self, config)


class ChainCutDrafter(Drafter):
    """draft-simple, drafting by cutting the recorded chains (see the module docstring); it counts the
    draft model's work as `DraftModelDrafter` would do it: a decode of `last`, then one per drafted
    token but the last."""

    def __init__(self, chains: DraftChains, config: SpecConfig):
        self.chains = chains
        self.n_max = int(config.value("draft_n_max"))
        self.n_min = int(config.value("draft_n_min"))
        self.p_min = float(config.value("draft_p_min"))
        self._prompt_length = 0
        self._current: list[Chain] = []
        self.draft_decodes = 0

    def begin(self, prompt: list[int]) -> None:
        self._prompt_length = len(prompt)
        self._current = self.chains.chains[tuple(prompt)]

    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        tokens, probs = self._current[len(history) - self._prompt_length]
        limit = min(self.n_max, n_max, len(tokens))
        drafted: list[int] = []
        for token, probability in zip(tokens[:limit], probs[:limit]):
            if self.p_min > 0 and probability < self.p_min:
                break
            drafted.append(token)
        self.draft_decodes += len(drafted) if len(drafted) == limit else 1 + len(drafted)
        return drafted if len(drafted) >= self.n_min else []


def chain_length(space: SearchSpace) -> int:
    """The longest draft-simple draft a space allows: the chains are recorded that long."""
    return max(
        (int(r.high) for ranges in space.spec_types.values() for r in ranges if r.param.name == "draft_n_max"),
        default=3,
    )
