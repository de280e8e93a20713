"""``retrieval_gate="lm"``: the reader decides, zero-shot. It *is* LM reranking with two candidates, the window's
passage (retrieval's top, or the reranked choice: it decides after reranking) and no passage, ranked on the same ranking
tokens ([`LMGateStrategy.ranking_settings`][hf_ralm.selection.strategies.gate_lm.LMGateStrategy.ranking_settings]);
the passage stays when it saves at least ``gate_threshold`` nats of their NLL (``None``:
[`LM_GATE_MARGIN`][hf_ralm.selection.strategies.gate_lm.LM_GATE_MARGIN]; ties keep it). Its score is ``NLL(no passage) -
NLL(passage)``.

Examples:
    >>> from hf_ralm.config.configuration_ralm import RalmConfig
    >>> from hf_ralm.core.passages import Passage
    >>> rome = Passage("1", "", "rome", 6.1)
    >>> gate = LMGateStrategy()
    >>> ranking = RalmConfig(**gate.ranking_settings(RalmConfig(retrieval_gate="lm")))   # the margin: 2 nats
    >>> saves = Candidates([rome], None, 0, options=[rome, None], ranking_nlls=[10.0, 12.5])   # 2.5 nats
    >>> gate.opens(saves, ranking), gate.score(saves)
    (True, 2.5)
"""

from __future__ import annotations

from ...errors import SettingError, setting
from ...utils.checks import is_finite_number
from ..rules import choose_ranked
from .registry import AFTER, RANKING_NLLS, Candidates, ComparisonRow, GateStrategy, register_strategy

LM_GATE_MARGIN = 2.0
"""The lm gate's default margin in nats (``gate_threshold=None``): chosen on WikiText-103 valid and held-out
Wikipedia validation articles, as the margin with the lowest geometric mean of their token perplexities, and then
checked on test (``benchmarks/tables/gate_margin.py``; docs/results.md)."""


class LMGateStrategy(GateStrategy):
    """The lm gate: the reader weighs the window's passage against no passage on the ranking tokens."""

    name = "lm"
    help = (f"when the passage lowers the model's NLL of the last {setting('rerank_tokens')} tokens by "
            f"{setting('gate_threshold')} nats, compared with no passage")
    fields = ("gate_threshold", "rerank_tokens")
    needs = frozenset({RANKING_NLLS})
    position = AFTER
    one_passage = True

    def validate(self, config) -> None:
        if config.gate_threshold is not None and not is_finite_number(config.gate_threshold):
            raise SettingError(f"The lm gate's {setting('gate_threshold')} is the nats a passage must save on the "
                               f"ranking tokens (a finite number, or None for {LM_GATE_MARGIN}), got "
                               f"{config.gate_threshold!r}.")

    def reader_inputs(self, config) -> int:
        return 2  # the passage and no passage

    def margin(self, config) -> float:
        """The nats the passage must save.

        Args:
            config: the settings.

        Returns:
            ``gate_threshold`` when ``config`` gates with the lm gate and gives one, else
                [`LM_GATE_MARGIN`][hf_ralm.selection.strategies.gate_lm.LM_GATE_MARGIN].
        """
        given = config.retrieval_gate == self.name and config.gate_threshold is not None
        return config.gate_threshold if given else LM_GATE_MARGIN

    def ranking_settings(self, config) -> dict:
        """LM reranking by the reader of one passage (the window's) against none, the passage needing the margin.

        Args:
            config: the run's settings.

        Returns:
            The settings the gate ranks under, on top of ``config``'s.
        """
        return {"rerank": "lm", "rerank_candidates": 1, "rerank_allow_no_passage": True,
                "rerank_no_passage_margin": self.margin(config), "reranker_model": None, "retrieval_gate": "always",
                "gate_threshold": None}

    def opens(self, candidates: Candidates, config) -> bool:
        if not candidates.passages or candidates.ranking_nlls is None:  # nothing to weigh, or no token to rank on
            return True
        return choose_ranked(candidates.ranking_nlls, candidates.options, config) == 0

    def score(self, candidates: Candidates) -> float | None:
        nlls = candidates.ranking_nlls
        return None if not candidates.passages or nlls is None else nlls[1] - nlls[0]

    def comparisons(self) -> list[ComparisonRow]:
        return [ComparisonRow("lm-gate", "the first passage when the reader finds it saves gate_threshold nats",
                              lambda config: {self.stage: self.name, "gate_threshold": self.margin(config)})]


register_strategy(LMGateStrategy())
