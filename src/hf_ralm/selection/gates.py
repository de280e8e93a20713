"""Retrieval gates: whether a window (or a generation stride) retrieves at all (``RalmConfig.retrieval_gate``). The
gates are strategies of the registry ([`hf_ralm.selection.strategies`][hf_ralm.selection.strategies]:
``gate_always.py``, ``gate_score.py``, ``gate_lm.py``); this module computes what they decide on.

* ``"always"``: every window after the first puts retrieval's passage in context (the paper).
* ``"score"``: only when the top passage's retrieval score, divided by its query's maximum attainable score
  ([`max_scores`][hf_ralm.Retriever.max_scores]; BM25: the sum of the idf of the query's terms, which no
  passage reaches), is at least ``gate_threshold``. Raw BM25 scores grow with the query's terms and their rarity, so
  they are not comparable across queries; the fraction is (0: nothing matched, towards 1: every query term matched
  as strongly as it can be). The gate score is that fraction.
* ``"lm"``: the reader decides, zero-shot. It *is* LM reranking with two candidates, the window's passage and no
  passage ([`lm_gate_config`][hf_ralm.selection.gates.lm_gate_config]: ``rerank="lm"``, ``rerank_candidates=1``,
  ``rerank_allow_no_passage=True``), ranked on the same ranking tokens (the last ``rerank_tokens`` prefix tokens,
  [`hf_ralm.selection.rules`][hf_ralm.selection.rules]): the passage stays when it saves at least ``gate_threshold``
  nats of their NLL (``None``: [`LM_GATE_MARGIN`][hf_ralm.selection.gates.LM_GATE_MARGIN], 2 nats, chosen on validation
  data; 0 keeps it whenever its ranking NLL is not higher than without it; ties keep it, as reranking's ties go to the
  better rank). The gate score is ``NLL(no passage) - NLL(passage)``, the nats the passage saves: it stays when that is
  >= the threshold. A positive threshold is a margin: the reader must find clear evidence on the prefix that the passage
  helps, since a passage that merely ties displaces up to 256 of the window's own tokens.

[`PassagePolicy`][hf_ralm.selection.policy.PassagePolicy] applies them: with reranking (``rerank``), the score gate
decides first, on retrieval's top passage (a closed window has no candidates, so nothing is ranked there), and the lm
gate last, on the reranked choice (with the reader ranking, ``rerank="lm"``, that gives the choices of
``rerank_allow_no_passage`` at the cost of one more pass). A closed window is evaluated exactly as a window whose
retrieval found nothing. ``retrieved_fraction`` is the share of the windows after the first that had a passage in
context.

Examples:
    >>> config = lm_gate_config(RalmConfig(retrieval_gate="lm"))   # the reader ranks one passage against none
    >>> config.rerank, config.rerank_candidates, config.rerank_allow_no_passage, config.rerank_no_passage_margin
    ('lm', 1, True, 2.0)
"""

from __future__ import annotations

from typing import Sequence

from ..config.configuration_ralm import RalmConfig
from ..errors import SettingError, setting
from ..core.model_inputs import context_indices
from ..core.passages import Passage
from ..core.windows import Window
from ..config.strategy_settings import GATE
from .strategies import GateStrategy, get_strategy
from .strategies.gate_lm import LM_GATE_MARGIN  # noqa: F401  (documented here too: the lm gate's margin)


def normalized_top_scores(retriever, queries: Sequence[str | None],
                          found: Sequence[Sequence[Passage]]) -> list[float | None]:
    """The score gate's measure: per query, its top passage's score divided by the query's maximum attainable score.

    Args:
        retriever: the retriever the passages came from (its ``max_scores`` gives the bounds).
        queries: the queries.
        found: per query, its retrieved passages, the top one first.

    Returns:
        Per query, the normalised top score (0 where the bound is 0); ``None`` where nothing was found.

    Raises:
        SettingError: there is no retriever (a retrieval file holds raw scores), or it has no ``max_scores``.

    Examples:
        ```python
        normalized_top_scores(bm25, ["the emperor of rome"], [[Passage("1", "", "rome", 6.1)]])   # [0.43]
        ```
    """
    scores: list[float | None] = [None] * len(found)
    todo = [i for i, passages in enumerate(found) if passages]
    if not todo:
        return scores
    if retriever is None:
        raise SettingError(f"{setting('retrieval_gate')}='score' divides each top score by its query's maximum "
                           "attainable score, which only the retriever knows, and a retrieval file holds raw scores: "
                           "evaluate with the retriever, or write the file with the gate applied (hf-ralm retrieve "
                           "--retrieval-gate score) and evaluate it with the default gate.")
    if not hasattr(retriever, "max_scores"):
        raise SettingError(f"{setting('retrieval_gate')}='score' needs the retriever's max_scores(queries) to compare "
                           f"scores across queries; {type(retriever).__name__} has none: use "
                           f"{setting('retrieval_gate')}='lm'.")
    bounds = retriever.max_scores([queries[i] for i in todo])
    for i, bound in zip(todo, bounds):
        scores[i] = found[i][0].score / bound if bound > 0 else 0.0
    return scores


def gate_ranking_config(config: RalmConfig, gate: GateStrategy) -> RalmConfig:
    """The config a gate that decides after reranking ranks under.

    Args:
        config: the run's settings.
        gate: the gate (the lm gate: the reader ranks one passage against none on the last ``rerank_tokens`` prefix
            tokens, the passage needing its ``gate_threshold`` nats).

    Returns:
        ``config`` with the gate's ranking settings
            ([`ranking_settings`][hf_ralm.selection.strategies.registry.GateStrategy.ranking_settings]).
    """
    return RalmConfig(**{**config.to_dict(), **gate.ranking_settings(config)})


def lm_gate_config(config: RalmConfig) -> RalmConfig:
    """The reranking the lm gate is ([`gate_ranking_config`][hf_ralm.selection.gates.gate_ranking_config]).

    Args:
        config: the run's settings.

    Returns:
        ``config`` ranking as the lm gate does, with the lm gate's margin: ``config``'s ``gate_threshold`` when it
            gates with the lm gate, else [`LM_GATE_MARGIN`][hf_ralm.selection.gates.LM_GATE_MARGIN]; the rest of
            ``config`` as it is.

    Examples:
        >>> lm_gate_config(RalmConfig(retrieval_gate="lm", gate_threshold=1.5)).rerank_no_passage_margin
        1.5
    """
    return gate_ranking_config(config, get_strategy(GATE, "lm"))


def retrieved_fraction(windows: Sequence[Window], passages: Sequence[Sequence[Passage]],
                       chosen: Sequence[int]) -> float | None:
    """The share of the windows after the first that had a passage in context.

    Args:
        windows: a text's windows.
        passages: each window's retrieved passages.
        chosen: per window, the passage chosen (negative: none).

    Returns:
        The share, or ``None`` for a text of one window.

    Examples:
        >>> from hf_ralm.core.windows import plan_windows
        >>> retrieved_fraction(plan_windows(10, 6, 2), [[], ["a"], ["b"]], [-1, 0, -1])
        0.5
    """
    later = [w for w in windows if w.has_retrieval]
    if not later:
        return None
    retrieved = sum(1 for w in later if context_indices(chosen[w.index], len(passages[w.index]), 1))
    return retrieved / len(later)
