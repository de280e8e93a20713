"""The predictive reranker's held-out windows and their figures: the split by article (``split_by_article``) and how
the reranker's choices do on the windows held out (``rerank_metrics``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import SettingError, setting
from ..selection.predictive import argmax_first

if TYPE_CHECKING:
    import datasets


def split_by_article(dataset: datasets.Dataset, eval_fraction: float,
                     max_train_windows: int | None = None) -> tuple[datasets.Dataset, datasets.Dataset]:
    """The training windows and the held-out ones, split by article.

    The windows of the articles whose id hashes below ``eval_fraction`` (SHA-256, so the split is the same on every
    machine and for every amount of data, and an article is on one side only) are held out.

    Args:
        dataset: Text rows with an ``article`` column.
        eval_fraction: About the share of the articles held out.
        max_train_windows: The training takes the first this many of the other windows, in data order (all when
            ``None``).

    Returns:
        ``(train, held out)``.

    Raises:
        SettingError: One side would be empty.

    Examples:
        >>> import datasets
        >>> rows = datasets.Dataset.from_dict({"article": [str(i // 4) for i in range(400)]})
        >>> train, held_out = split_by_article(rows, 0.1, max_train_windows=100)
        >>> train.num_rows, held_out.num_rows, set(train["article"]) & set(held_out["article"])   # 6 of 100 articles
        (100, 24, set())
    """
    held = [_held_out(article, eval_fraction) for article in dataset["article"]]
    train_rows = [i for i, h in enumerate(held) if not h][:max_train_windows]
    eval_rows = [i for i, h in enumerate(held) if h]
    if not train_rows or not eval_rows:
        raise SettingError(
            f"The data's {dataset.num_rows} window(s) from {len(set(dataset['article']))} article(s) are too few to "
            f"hold out about {eval_fraction:.0%} of the articles and train on the rest: write more windows (or change "
            f"{setting('eval_fraction')}).")
    return dataset.select(train_rows), dataset.select(eval_rows)


def _held_out(article: str, eval_fraction: float) -> bool:
    digest = hashlib.sha256(str(article).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction


def rerank_metrics(
    scores: Sequence[Sequence[float]],
    target_logprobs: Sequence[Sequence[float]],
    no_passage: bool = False,
) -> dict[str, float]:
    """How well the reranker's choices (argmax of ``scores``) do on windows.

    They are held to the oracle's (argmax of the target log-probabilities) and to retrieval's top-1 (candidate 0).
    NLLs are ``-target_logprob`` of the chosen candidate, in nats per window (summed over the stride's tokens),
    averaged over windows.

    Args:
        scores: Per window, the reranker's scores of its candidates.
        target_logprobs: Per window, its candidates' target log-probabilities.
        no_passage: The last candidate of each window is no passage: ``no_passage_chosen`` is then the share of
            windows the reranker left without one, and ``nll_no_passage`` their mean NLL without a passage.

    Returns:
        ``oracle_agreement``, ``retrieval_oracle_agreement``, ``chance_agreement``, ``nll_reranker``,
            ``nll_retrieval_top1`` and ``nll_oracle`` (and the two no-passage figures).

    Raises:
        ValueError: No windows, or not as many score lists as target lists.

    Examples:
        ```python
        rerank_metrics([[0.1, 0.9]], [[-4.0, -2.0]])
        # {'oracle_agreement': 1.0, 'retrieval_oracle_agreement': 0.0, 'chance_agreement': 0.5,
        #  'nll_reranker': 2.0, 'nll_retrieval_top1': 4.0, 'nll_oracle': 2.0}
        ```
    """
    n = len(scores)
    if not n or n != len(target_logprobs):
        raise ValueError("Need the same non-zero number of windows in scores and target_logprobs.")
    picks = [argmax_first(window) for window in scores]
    oracle = [argmax_first(window) for window in target_logprobs]
    figures = {
        "oracle_agreement": sum(p == o for p, o in zip(picks, oracle)) / n,
        "retrieval_oracle_agreement": sum(o == 0 for o in oracle) / n,
        "chance_agreement": sum(1 / len(window) for window in target_logprobs) / n,
        "nll_reranker": -sum(window[p] for window, p in zip(target_logprobs, picks)) / n,
        "nll_retrieval_top1": -sum(window[0] for window in target_logprobs) / n,
        "nll_oracle": -sum(max(window) for window in target_logprobs) / n,
    }
    if no_passage:
        figures["no_passage_chosen"] = sum(p == len(w) - 1 for p, w in zip(picks, target_logprobs)) / n
        figures["nll_no_passage"] = -sum(window[-1] for window in target_logprobs) / n
    return figures
