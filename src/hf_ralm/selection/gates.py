"""Retrieval gates: whether a window (or a generation stride) retrieves at all (``RalmConfig.retrieval_gate``).

* ``"always"``: every window after the first puts retrieval's passage in context (the paper).
* ``"score"``: only when the top passage's retrieval score, divided by its query's maximum attainable score
  (:meth:`~hf_ralm.retrieval.base.Retriever.max_scores`; BM25: the sum of the idf of the query's terms, which no
  passage reaches), is at least ``gate_threshold``. Raw BM25 scores grow with the query's terms and their rarity, so
  they are not comparable across queries; the fraction is (0: nothing matched, towards 1: every query term matched
  as strongly as it can be). The gate score is that fraction.
* ``"lm"``: the reader decides, zero-shot. It *is* LM reranking with two candidates, the window's passage and no
  passage (:func:`lm_gate_config`: ``rerank="lm"``, ``rerank_candidates=1``, ``rerank_allow_no_passage=True``), ranked
  on the same ranking tokens (the last ``rerank_tokens`` prefix tokens, :mod:`hf_ralm.selection.rules`): the passage
  stays when it saves at least ``gate_threshold`` nats of their NLL (``None``: :data:`LM_GATE_MARGIN`, 2 nats,
  chosen on validation data; 0 keeps it whenever its ranking NLL is not higher than without it; ties keep it, as
  reranking's ties go to the better rank). The gate score is
  ``NLL(no passage) - NLL(passage)``, the nats the passage saves: it stays when that is >= the threshold. A positive
  threshold is a margin: the reader must find clear evidence on the prefix that the passage helps, since a passage
  that merely ties displaces up to 256 of the window's own tokens.

:class:`~hf_ralm.selection.policy.PassagePolicy` applies them: with reranking (``rerank``), the score gate decides
first, on retrieval's top passage (a closed window has no candidates, so nothing is ranked there), and the lm gate
last, on the reranked choice (with the reader ranking, ``rerank="lm"``, that gives the choices of
``rerank_allow_no_passage`` at the cost of one more pass). A closed window is evaluated exactly as a window whose
retrieval found nothing. ``retrieved_fraction`` is the share of the windows after
the first that had a passage in context.

Example:
    >>> score_gate_pools([["a", "b"], ["c"]], [0.4, 0.1], threshold=0.3)   # the second closes
    [['a', 'b'], []]
    >>> lm_gate_scores([[10.0, 12.5]])   # the passage saves 2.5 nats of ranking NLL
    [2.5]
"""

from __future__ import annotations

from typing import Sequence

from ..configuration_ralm import RalmConfig
from ..errors import SettingError, setting
from ..model_inputs import context_indices
from ..passages import Passage
from ..windows import Window


def normalized_top_scores(retriever, queries: Sequence[str | None],
                          found: Sequence[Sequence[Passage]]) -> list[float | None]:
    """Per query, its top passage's score divided by the query's maximum attainable score (``retriever.max_scores``),
    the score gate's measure; ``None`` where nothing was found.

    Example::

        normalized_top_scores(bm25, ["the emperor of rome"], [[Passage("1", "", "rome", 6.1)]])   # [0.43]
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


def score_gate_pools(found: Sequence[Sequence[Passage]], gate_scores: Sequence[float | None],
                     threshold: float) -> list[list[Passage]]:
    """What each window (stride) may put in context behind the score gate: its passages when its gate score is at
    least ``threshold``, else none.

    Example:
        >>> score_gate_pools([["a", "b"], ["c"], []], [0.4, 0.1, None], threshold=0.3)
        [['a', 'b'], [], []]
    """
    return [list(passages) if score is not None and score >= threshold else []
            for passages, score in zip(found, gate_scores)]


LM_GATE_MARGIN = 2.0
"""The lm gate's default margin in nats (``gate_threshold=None``): chosen on WikiText-103 valid and held-out
Wikipedia validation articles, as the margin with the lowest geometric mean of their token perplexities, and then
checked on test (``benchmarks/gate_margin.py``; docs/results.md)."""


def lm_gate_config(config: RalmConfig) -> RalmConfig:
    """The reranking the lm gate is: the reader ranks one passage (the window's) against none on the last
    ``rerank_tokens`` prefix tokens, the passage needing the lm gate's ``gate_threshold`` nats
    (``rerank_no_passage_margin``); the rest of ``config`` as it is.

    Example:
        >>> lm_gate_config(RalmConfig(retrieval_gate="lm", gate_threshold=2.0)).rerank_no_passage_margin
        2.0
    """
    given = config.retrieval_gate == "lm" and config.gate_threshold is not None
    margin = config.gate_threshold if given else LM_GATE_MARGIN
    return RalmConfig(**{**config.to_dict(), "rerank": "lm", "rerank_candidates": 1, "rerank_allow_no_passage": True,
                         "rerank_no_passage_margin": margin, "reranker_model": None, "retrieval_gate": "always",
                         "gate_threshold": None})


def lm_gate_scores(ranking_nlls: Sequence[Sequence[float] | None]) -> list[float | None]:
    """The lm gate's scores from its ranking NLLs ``[passage, no passage]``: the nats the passage saves.

    Example:
        >>> lm_gate_scores([[10.0, 12.5], None])
        [2.5, None]
    """
    return [None if nlls is None else nlls[1] - nlls[0] for nlls in ranking_nlls]


def retrieved_fraction(windows: Sequence[Window], passages: Sequence[Sequence[Passage]],
                       chosen: Sequence[int]) -> float | None:
    """The share of the windows after the first that had a passage in context (``None`` for a text of one window).

    Example:
        >>> from hf_ralm.windows import plan_windows
        >>> retrieved_fraction(plan_windows(10, 6, 2), [[], ["a"], ["b"]], [-1, 0, -1])
        0.5
    """
    later = [w for w in windows if w.has_retrieval]
    if not later:
        return None
    retrieved = sum(1 for w in later if context_indices(chosen[w.index], len(passages[w.index]), 1))
    return retrieved / len(later)
