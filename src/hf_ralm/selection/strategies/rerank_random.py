"""``rerank="random"``: a uniform choice among the candidates, seeded by ``rerank_seed`` and the window (a generation
stride: its prompt and index), whatever the batching ([`random_choice`][hf_ralm.selection.rules.random_choice]): a
floor.

Examples:
    >>> from hf_ralm.config.configuration_ralm import RalmConfig
    >>> from hf_ralm.core.passages import Passage
    >>> pool = [Passage(str(i), "", "text", 1.0) for i in range(4)]
    >>> RandomRerankStrategy().choose(Candidates(pool, None, 7), RalmConfig(rerank="random")) == random_choice(0, 7, 4)
    True
"""

from __future__ import annotations

from ..rules import random_choice
from .registry import Candidates, RerankStrategy, register_strategy


class RandomRerankStrategy(RerankStrategy):
    """A seeded uniform choice."""

    name = "random"
    help = "a floor"
    fields = ("rerank_candidates", "rerank_seed")

    def choose(self, candidates: Candidates, config) -> int:
        return random_choice(config.rerank_seed, candidates.key, len(candidates.passages))


register_strategy(RandomRerankStrategy())
