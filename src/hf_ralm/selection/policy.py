"""One passage-selection policy for evaluation (per window) and generation (per stride): the score gate, then the
reranking strategy of ``config.rerank``, then the lm gate; each written once, whoever asks.

What differs between evaluation and generation is only how an LM ranks a set of options (a window's input, or a
stride's growing context): a :class:`Ranker` gives the summed ranking NLLs of each item's options, and the policy
does the rest. A new strategy is added here, and evaluation and generation both have it.

* **score gate** (``retrieval_gate="score"``): an item keeps its passages only when its top passage's score over its
  query's maximum attainable score reaches ``gate_threshold`` (:func:`~hf_ralm.selection.gates.normalized_top_scores`).
* **reranking** among the first ``rerank_candidates`` passages: ``"none"`` (the first), ``"random"``
  (:func:`~hf_ralm.selection.rules.random_choice` with the caller's key per item), ``"predictive"`` (a trained
  cross-encoder, :func:`~hf_ralm.selection.predictive.choose_predictive`), ``"lm"`` and ``"oracle"`` (the lowest
  ranking NLL, :func:`~hf_ralm.selection.rules.choose_ranked`, with the no-passage option and its margin when
  allowed; ranked by the reader, or by another LM for ``"lm"`` with a reranker).
* **lm gate** (``retrieval_gate="lm"``): the reader ranks the chosen passage against no passage
  (:func:`~hf_ralm.selection.gates.lm_gate_config`): the passage stays when it saves ``gate_threshold`` nats.

Example::

    policy = PassagePolicy(config, retriever, reranker)
    selection = policy.select(queries, found, ranker, random_keys=[w.index for w in windows])
    selection.chosen   # per item, the index of the passage put in context first (-1: none)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ..configuration_ralm import RalmConfig
from ..errors import SettingError, setting
from ..passages import NO_PASSAGE, Passage
from .gates import lm_gate_config, lm_gate_scores, normalized_top_scores, score_gate_pools
from .predictive import choose_predictive
from .rankers import LMReranker
from .rules import choose_ranked, random_choice, rerank_options


class Ranker(Protocol):
    """How an LM ranks options for the items being selected for (a chunk's windows, a batch's rows)."""

    def rank(self, items: Sequence[int], options: Sequence[Sequence[Passage | None]], config: RalmConfig,
             lm: LMReranker | None) -> list[list[float] | None]:
        """Per item (an index into the caller's windows or rows), the summed ranking NLL of each of its
        ``options`` (``None``: no passage) on the tokens ``config`` ranks on (``rerank_tokens`` before the target,
        or the target itself for the oracle), by the reader (``lm=None``) or another LM; ``None`` for an item
        with nothing to rank on. An item whose only option is no passage may be left unranked (``None``)."""


@dataclass
class Selection:
    """What the policy chose, per item: ``chosen`` (the index of the passage put in context first among the item's
    passages, :data:`~hf_ralm.passages.NO_PASSAGE` for none), ``ranking_nlls`` (the reranker's, one per option, no
    passage last when it was one; ``None`` where no LM ranked), ``gate_scores`` (what a gate decided on, or ``None``
    without a gate), ``reranked`` (the item had candidates to rerank, after the score gate), ``none_chosen``
    (the reranker chose no passage) and ``gated`` (a gate closed the item)."""

    chosen: list[int]
    ranking_nlls: list[list[float] | None]
    gate_scores: list[float | None] | None
    reranked: list[bool]
    none_chosen: list[bool]
    gated: list[bool]


class PassagePolicy:
    """Gate, rerank, gate (see the module docstring) under ``config``; ``retriever`` normalises scores for the score
    gate; ``reranker`` is what ranks when the reader does not: an :class:`~hf_ralm.selection.rankers.LMReranker`
    (``"lm"`` with another LM) or a :class:`~hf_ralm.selection.predictive.PredictiveReranker` (``"predictive"``).

    Example::

        PassagePolicy(RalmConfig(rerank="predictive", reranker_model="me/reranker"))   # ValueError: no reranker
    """

    def __init__(self, config: RalmConfig, retriever=None, reranker=None):
        config.validate()
        check_reranker(config, reranker)
        self.config, self.retriever, self.reranker = config, retriever, reranker
        self.gate_config = lm_gate_config(config) if config.retrieval_gate == "lm" else None

    def select(self, queries: Sequence[str], found: Sequence[Sequence[Passage]], ranker: Ranker,
               random_keys: Sequence[int]) -> Selection:
        """Choose for each item (its ``queries[i]``, retrieved passages ``found[i]`` in retrieval order, and
        ``random_keys[i]``, what a random choice is keyed on) with ``ranker`` ranking for the LM strategies."""
        pools = [list(passages)[: self.config.rerank_candidates] if self.config.rerank != "none" else list(passages)
                 for passages in found]
        gate_scores = None
        gated = [False] * len(found)
        if self.config.retrieval_gate == "score":
            gate_scores = normalized_top_scores(self.retriever, queries, found)
            pools = score_gate_pools(pools, gate_scores, self.config.gate_threshold)
            gated = [bool(passages) and not pool for passages, pool in zip(found, pools)]
        chosen, ranking = self.rerank(queries, pools, ranker, random_keys)
        none_chosen = [bool(pool) and choice < 0 for pool, choice in zip(pools, chosen)]
        if self.gate_config is not None:
            kept = [[pool[choice]] if choice >= 0 else [] for pool, choice in zip(pools, chosen)]
            nlls = ranker.rank(range(len(kept)), [rerank_options(pool, self.gate_config) or [None] for pool in kept],
                               self.gate_config, None)
            verdicts = [choose_ranked(sums, rerank_options(pool, self.gate_config), self.gate_config)
                        if pool and sums is not None else 0 for pool, sums in zip(kept, nlls)]
            gated = [closed or (bool(pool) and verdict != 0) for closed, pool, verdict in zip(gated, kept, verdicts)]
            chosen = [choice if verdict == 0 else NO_PASSAGE for choice, verdict in zip(chosen, verdicts)]
            gate_scores = lm_gate_scores([sums if pool else None for pool, sums in zip(kept, nlls)])
        return Selection(chosen, ranking, gate_scores, [bool(pool) for pool in pools], none_chosen, gated)

    def rerank(self, queries: Sequence[str], pools: Sequence[list[Passage]], ranker: Ranker,
               random_keys: Sequence[int]) -> tuple[list[int], list[list[float] | None]]:
        """The reranking step alone: per item, the chosen index into its pool (:data:`NO_PASSAGE` for none) and
        the ranking NLLs of its options (``None`` where no LM ranked)."""
        config, none = self.config, [None] * len(pools)
        if config.rerank == "none":
            return [0 if pool else NO_PASSAGE for pool in pools], none
        if config.rerank == "random":
            return [random_choice(config.rerank_seed, key, len(pool)) if pool else NO_PASSAGE
                    for key, pool in zip(random_keys, pools)], none
        if config.rerank == "predictive":
            return choose_predictive(self.reranker, queries, pools, config), none
        options = [rerank_options(pool, config) or [None] for pool in pools]  # nothing retrieved: as it is
        sums = ranker.rank(range(len(pools)), options, config, self.reranker)
        chosen, ranking = [], []
        for pool, item_options, item_sums in zip(pools, options, sums):
            if not pool:
                chosen.append(NO_PASSAGE)
                ranking.append(None)
                continue
            best = choose_ranked(item_sums, item_options, config) if item_sums is not None else 0
            chosen.append(best if best < len(pool) else NO_PASSAGE)
            ranking.append(item_sums)
        return chosen, ranking


def reader_ranks(config: RalmConfig) -> bool:
    """Whether choosing passages under ``config`` runs the reader: its own LM reranking (``"lm"`` without a
    ``reranker_model``), the oracle (which scores the target) or the LM gate. Otherwise retrieval needs only the
    reader's tokenizer and maximum length.

    Example:
        >>> reader_ranks(RalmConfig(rerank="predictive", reranker_model="me/reranker")), reader_ranks(RalmConfig())
        (False, False)
        >>> reader_ranks(RalmConfig(rerank="lm")), reader_ranks(RalmConfig(retrieval_gate="lm"))
        (True, True)
    """
    return (config.rerank == "lm" and config.reranker_model is None) or config.rerank == "oracle" \
        or config.retrieval_gate == "lm"


def check_reranker(config: RalmConfig, reranker) -> None:
    """Raise a ``ValueError`` unless ``reranker`` is what ``config.rerank`` ranks with: a trained reranker for
    ``"predictive"``, an :class:`~hf_ralm.selection.rankers.LMReranker` (or nothing: the reader) for ``"lm"``, and
    one whenever ``reranker_model`` names one."""
    hint = "pass reranker=load_reranker(config, model) (RetrievalAugmentedModel passes its own)"
    if config.rerank == "predictive" and reranker is None:
        raise SettingError(f"{setting('rerank')}='predictive' needs its trained reranker: {hint}.")
    if config.rerank != "lm":
        return
    if reranker is not None and not isinstance(reranker, LMReranker):
        raise SettingError(f"{setting('rerank')}='lm' ranks with the reader or with another LM (an LMReranker), got a "
                           f"{type(reranker).__name__}: {hint}.")
    if reranker is None and config.reranker_model is not None:
        raise SettingError(f"{setting('reranker_model')}={config.reranker_model!r} is to rank for "
                           f"{setting('rerank')}='lm', but no reranker was given: {hint}, or drop "
                           f"{setting('reranker_model')} to let the reader rank.")
