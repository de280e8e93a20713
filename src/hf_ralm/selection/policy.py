"""One passage-selection policy for evaluation (per window) and generation (per stride): a gate that decides before
reranking, the reranking strategy of ``config.rerank``, a gate that decides after it. The strategies are the registry's
([`hf_ralm.selection.strategies`][hf_ralm.selection.strategies]): the policy computes what each one needs and lets it
choose, so a strategy registered from outside the package is chosen here as the built-in ones are, in evaluation and
generation.

What differs between evaluation and generation is only how an LM ranks a set of options (a window's input, or a stride's
growing context): a [`Ranker`][hf_ralm.selection.policy.Ranker] gives the summed ranking NLLs of each item's options,
and the policy does the rest.

* **a gate before reranking** (``retrieval_gate="score"``): an item keeps its passages only when the gate opens
  (its top passage's score over its query's maximum attainable score reaches ``gate_threshold``,
  [`normalized_top_scores`][hf_ralm.selection.gates.normalized_top_scores]).
* **reranking** among the first ``rerank_candidates`` passages (``"none"`` keeps retrieval's order, and all of them):
  the strategy chooses from what it needs, computed here
  ([`PassagePolicy.candidates`][hf_ralm.selection.policy.PassagePolicy.candidates]): an LM's ranking or target NLLs
  through the ranker (by the reader, or another LM for ``"lm"`` with a reranker), the cross-encoder's choice
  ([`choose_predictive`][hf_ralm.selection.predictive.choose_predictive]), the normalised top scores; a random choice is
  keyed on the caller's key per item.
* **a gate after reranking** (``retrieval_gate="lm"``): the reader ranks the chosen passage against no passage under
  the gate's ranking settings ([`gate_ranking_config`][hf_ralm.selection.gates.gate_ranking_config]): the passage stays
  when the gate opens (it saves ``gate_threshold`` nats).

Examples:
    ```python
    policy = PassagePolicy(config, retriever, reranker)
    selection = policy.select(queries, found, ranker, random_keys=[w.index for w in windows])
    selection.chosen   # per item, the index of the passage put in context first (-1: none)
    ```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ..config.configuration_ralm import RalmConfig
from ..errors import SettingError, setting
from ..core.passages import NO_PASSAGE, Passage
from .gates import gate_ranking_config, normalized_top_scores
from .predictive import choose_predictive
from .rankers import LMReranker
from .rules import rerank_options
from .strategies import AFTER, BEFORE, CROSS_ENCODER, NORMALIZED_SCORES, RANKING_NLLS, TARGET_NLLS
from ..config.strategy_settings import GATE, RERANK
from .strategies import Candidates, Strategy, get_strategy


class Ranker(Protocol):
    """How an LM ranks options for the items being selected for (a chunk's windows, a batch's rows)."""

    def rank(self, items: Sequence[int], options: Sequence[Sequence[Passage | None]], config: RalmConfig,
             lm: LMReranker | None) -> list[list[float] | None]:
        """The summed ranking NLL of each option of each item.

        Args:
            items: indices into the caller's windows or rows.
            options: per item, its options (a passage, or ``None`` for none).
            config: the tokens ranked on: ``rerank_tokens`` before the target, or the target itself when the
                strategy needs target NLLs ([`ranks_target`][hf_ralm.selection.strategies.registry.ranks_target]: the
                oracle).
            lm: another LM to rank with (``None``: the reader).

        Returns:
            Per item, its options' sums; ``None`` for an item with nothing to rank on (an item whose only option is
                no passage may be left unranked).
        """


@dataclass
class Selection:
    """What the policy chose, per item.

    Attributes:
        chosen: the index of the passage put in context first among the item's passages
            ([`NO_PASSAGE`][hf_ralm.core.passages.NO_PASSAGE] for none).
        ranking_nlls: the reranker's, one per option, no passage last when it was one (``None`` where no LM ranked).
        gate_scores: what a gate decided on (``None`` without a gate).
        reranked: whether the item had candidates to rerank, after the score gate.
        none_chosen: whether the reranker chose no passage.
        gated: whether a gate closed the item.
    """

    chosen: list[int]
    ranking_nlls: list[list[float] | None]
    gate_scores: list[float | None] | None
    reranked: list[bool]
    none_chosen: list[bool]
    gated: list[bool]


class PassagePolicy:
    """Gate, rerank, gate (see the module docstring) under ``config``.

    Args:
        config: the settings (checked here): the strategies and theirs.
        retriever: what normalises scores for the score gate.
        reranker: what ranks when the reader does not: an [`LMReranker`][hf_ralm.selection.rankers.LMReranker]
            (``"lm"`` with another LM) or a [`PredictiveReranker`][hf_ralm.selection.predictive.PredictiveReranker]
            (``"predictive"``).

    Raises:
        SettingError: the settings are wrong, or ``reranker`` is not what ``config.rerank`` ranks with.

    Examples:
        ```python
        PassagePolicy(RalmConfig(rerank="predictive", reranker_model="me/reranker"))   # ValueError: no reranker
        ```
    """

    def __init__(self, config: RalmConfig, retriever=None, reranker=None):
        config.validate()
        check_reranker(config, reranker)
        self.config, self.retriever, self.reranker = config, retriever, reranker
        self.strategy, self.gate = get_strategy(RERANK, config.rerank), get_strategy(GATE, config.retrieval_gate)
        self.gate_config = gate_ranking_config(config, self.gate) if self.gate.position == AFTER else None

    def select(self, queries: Sequence[str], found: Sequence[Sequence[Passage]], ranker: Ranker,
               random_keys: Sequence[int]) -> Selection:
        """Choose the passages of each item: gate, rerank, gate.

        Args:
            queries: ``queries[i]`` is item ``i``'s query.
            found: ``found[i]`` are its retrieved passages, in retrieval order.
            ranker: what ranks for the LM strategies.
            random_keys: ``random_keys[i]`` is what a random choice for item ``i`` is keyed on.

        Returns:
            The [`Selection`][hf_ralm.selection.policy.Selection].
        """
        gate = self.gate
        pools = [list(passages)[: self.config.rerank_candidates] if self.strategy.chooses else list(passages)
                 for passages in found]
        gate_scores = None
        gated = [False] * len(found)
        if gate.position == BEFORE:
            items = self.candidates(gate, queries, pools, random_keys, ranker, config=self.config, lm=None)
            gate_scores = [gate.score(item) for item in items]
            pools = [pool if gate.opens(item, self.config) else [] for pool, item in zip(pools, items)]
            gated = [bool(passages) and not pool for passages, pool in zip(found, pools)]
        chosen, ranking = self.rerank(queries, pools, ranker, random_keys)
        none_chosen = [bool(pool) and choice < 0 for pool, choice in zip(pools, chosen)]
        if gate.position == AFTER:
            kept = [[pool[choice]] if choice >= 0 else [] for pool, choice in zip(pools, chosen)]
            items = self.candidates(gate, queries, kept, random_keys, ranker, config=self.gate_config, lm=None)
            opens = [gate.opens(item, self.gate_config) for item in items]
            gated = [closed or (bool(pool) and not kept_open) for closed, pool, kept_open in zip(gated, kept, opens)]
            chosen = [choice if kept_open else NO_PASSAGE for choice, kept_open in zip(chosen, opens)]
            gate_scores = [gate.score(item) for item in items]
        return Selection(chosen, ranking, gate_scores, [bool(pool) for pool in pools], none_chosen, gated)

    def rerank(self, queries: Sequence[str], pools: Sequence[list[Passage]], ranker: Ranker,
               random_keys: Sequence[int]) -> tuple[list[int], list[list[float] | None]]:
        """The reranking step alone.

        Args:
            queries: ``queries[i]`` is item ``i``'s query.
            pools: ``pools[i]`` are its candidates, in retrieval order.
            ranker: what ranks for the LM strategies.
            random_keys: what each item's random choice is keyed on.

        Returns:
            Per item, the chosen index into its pool ([`NO_PASSAGE`][hf_ralm.core.passages.NO_PASSAGE] for none),
                and the NLLs an LM ranked its options on (``None`` where no LM ranked).
        """
        items = self.candidates(self.strategy, queries, pools, random_keys, ranker, config=self.config,
                                lm=self.reranker)
        chosen = [self.strategy.choose(item, self.config) if item.passages else NO_PASSAGE for item in items]
        ranking = [(item.ranking_nlls if item.target_nlls is None else item.target_nlls) if item.passages else None
                   for item in items]
        return chosen, ranking

    def candidates(self, strategy: Strategy, queries: Sequence[str], pools: Sequence[list[Passage]],
                   random_keys: Sequence[int], ranker: Ranker, *, config: RalmConfig, lm) -> list[Candidates]:
        """Each item's [`Candidates`][hf_ralm.selection.strategies.registry.Candidates] with what ``strategy`` needs.

        Args:
            strategy: the strategy about to choose.
            queries: the items' queries.
            pools: the items' candidates.
            random_keys: what each item's random choice is keyed on.
            ranker: what computes an LM's NLLs, for every item (one without passages included: the reader's pass
                then scores it too).
            config: the settings the numbers are computed under.
            lm: another LM to rank with (``None``: the reader).

        Returns:
            Per item, its candidates with the LM's NLLs, the cross-encoder's choice and the normalised top score,
                those the strategy needs.
        """
        options = [rerank_options(pool, config) for pool in pools]
        nlls = picks = normalized = [None] * len(pools)
        if strategy.needs & {RANKING_NLLS, TARGET_NLLS}:
            nlls = ranker.rank(range(len(pools)), [item_options or [None] for item_options in options], config, lm)
        if CROSS_ENCODER in strategy.needs:
            picks = choose_predictive(self.reranker, queries, pools, config)
        if NORMALIZED_SCORES in strategy.needs:
            normalized = normalized_top_scores(self.retriever, queries, pools)
        on_target = TARGET_NLLS in strategy.needs
        return [Candidates(pool, query, key, item_options, None if on_target else sums, sums if on_target else None,
                           pick, score)
                for pool, query, key, item_options, sums, pick, score
                in zip(pools, queries, random_keys, options, nlls, picks, normalized)]


def check_reranker(config: RalmConfig, reranker) -> None:
    """Check that ``reranker`` is what ``config.rerank`` ranks with.

    Args:
        config: the settings.
        reranker: a trained reranker for a strategy that needs a cross-encoder (``"predictive"``), an
            [`LMReranker`][hf_ralm.selection.rankers.LMReranker] (or nothing: the reader) for one that ranks with
            ``reranker_model``'s LM (``"lm"``), and one whenever ``reranker_model`` names one.

    Raises:
        SettingError: it is not (the message says how to load the right one).
    """
    hint = "pass reranker=load_reranker(config, model) (RetrievalAugmentedModel passes its own)"
    strategy = get_strategy(RERANK, config.rerank)
    if CROSS_ENCODER in strategy.needs and reranker is None:
        raise SettingError(f"{setting('rerank')}={config.rerank!r} needs its trained reranker: {hint}.")
    if RANKING_NLLS not in strategy.needs or "reranker_model" not in strategy.fields:
        return
    if reranker is not None and not isinstance(reranker, LMReranker):
        raise SettingError(f"{setting('rerank')}={config.rerank!r} ranks with the reader or with another LM (an "
                           f"LMReranker), got a {type(reranker).__name__}: {hint}.")
    if reranker is None and config.reranker_model is not None:
        raise SettingError(f"{setting('reranker_model')}={config.reranker_model!r} is to rank for "
                           f"{setting('rerank')}={config.rerank!r}, but no reranker was given: {hint}, or drop "
                           f"{setting('reranker_model')} to let the reader rank.")
