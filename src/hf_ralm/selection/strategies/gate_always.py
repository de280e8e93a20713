"""``retrieval_gate="always"``: every window after the first retrieves and keeps its passage (the paper)."""

from __future__ import annotations

from .registry import ComparisonRow, GateStrategy, register_strategy


class AlwaysGateStrategy(GateStrategy):
    """No gate: the window keeps what retrieval (and reranking) gives it."""

    name = "always"
    help = "default"
    chooses = False

    def comparisons(self) -> list[ComparisonRow]:
        return []  # --compare's top1 row


register_strategy(AlwaysGateStrategy())
