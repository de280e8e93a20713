"""Use side of the predictive reranker (Ram et al. 2023, §6.2): pick, for each prefix, the candidate passage a
trained cross-encoder ``f(x, d)`` scores highest.

Examples:
    ```python
    from hf_ralm.selection.predictive import PredictiveReranker

    reranker = PredictiveReranker("models/predictive-reranker")  # a folder or a Hub id
    reranker.choose(["the emperor of"], [["Music\\nthe band played", "Rome\\nrome was the city"]])  # -> [1]
    ```
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from ..errors import SettingError, setting
from ..utils.extras import require

if TYPE_CHECKING:  # sentence-transformers (the ``rerank`` extra) is imported only when a reranker is built
    from sentence_transformers import CrossEncoder


class PredictiveReranker:
    """A cross-encoder that scores (prefix, passage) pairs; the passage it scores highest goes in context.

    Args:
        model_name_or_path: a cross-encoder folder, a Hub id, or a loaded ``CrossEncoder`` (trained with one label,
            as [`train_reranker`][hf_ralm.reranker_training.train_reranker] trains it).
        device: where it runs (``None``: the device sentence-transformers picks, CUDA when available, or the one the
            given model is on).
        batch_size: the pairs scored in one pass.

    Raises:
        SettingError: ``batch_size`` is below 1.
        ValueError: the cross-encoder has more than one label.
        MissingExtraError: sentence-transformers (the ``rerank`` extra) is not installed.

    Examples:
        ```python
        reranker = PredictiveReranker("models/predictive-reranker", batch_size=64)
        scores = reranker.scores(["the emperor of"], [["Rome\\nrome was the city", "Music\\nthe band"]])
        ```
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike | CrossEncoder,
        device: str | None = None,
        batch_size: int = 32,
    ) -> None:
        if batch_size < 1:
            raise SettingError(f"{setting('batch_size')} must be at least 1, got {batch_size}.")
        cross_encoder_cls = _cross_encoder_class()
        if isinstance(model_name_or_path, cross_encoder_cls):
            self.model = model_name_or_path if device is None else model_name_or_path.to(device)
        else:
            self.model = cross_encoder_cls(str(model_name_or_path), device=device)
        if self.model.num_labels != 1:
            raise ValueError(
                f"A predictive reranker scores each pair with one number, but {model_name_or_path} has "
                f"{self.model.num_labels} labels: load a cross-encoder trained with num_labels=1 (train_reranker)."
            )
        self.batch_size = batch_size

    @property
    def device(self) -> torch.device:
        """The device the cross-encoder runs on."""
        return self.model.device

    def scores(
        self, prefixes: Sequence[str], candidates: Sequence[Sequence[str]], show_progress: bool = False
    ) -> list[list[float]]:
        """The raw scores ``f(x, d)`` (logits, no sigmoid) of every candidate of every prefix, in one batched pass
        over all pairs.

        Args:
            prefixes: the texts the passages would go before.
            candidates: per prefix, its candidates' texts.
            show_progress: show a progress bar of the batches.

        Returns:
            ``scores[i][j]``, the score of ``candidates[i][j]``.

        Raises:
            ValueError: ``prefixes`` and ``candidates`` differ in length.
        """
        if len(prefixes) != len(candidates):
            raise ValueError(f"Got {len(prefixes)} prefixes but {len(candidates)} candidate lists; give one each.")
        pairs = [(prefix, passage) for prefix, passages in zip(prefixes, candidates) for passage in passages]
        flat = []
        if pairs:
            # Identity: the trained f(x, d) itself (the softmax of Eq. 9 reads logits); a saved sigmoid would only
            # squash them, never change the choice.
            flat = self.model.predict(
                pairs, batch_size=self.batch_size, activation_fn=torch.nn.Identity(),
                show_progress_bar=show_progress, convert_to_numpy=True,
            ).tolist()
        result, start = [], 0
        for passages in candidates:
            result.append(flat[start:start + len(passages)])
            start += len(passages)
        return result

    def choose(
        self, prefixes: Sequence[str], candidates: Sequence[Sequence[str]], show_progress: bool = False
    ) -> list[int]:
        """For each prefix, the index of its best-scored candidate.

        Args:
            prefixes: the texts the passages would go before.
            candidates: per prefix, its candidates' texts, in retrieval order.
            show_progress: show a progress bar of the batches.

        Returns:
            Per prefix, the index of its highest-scored candidate (ties go to the lower index, the better retrieval
                rank); -1 for an empty candidate list.
        """
        return [argmax_first(scores) for scores in self.scores(prefixes, candidates, show_progress)]


NO_PASSAGE_TEXT = ""
"""The text the cross-encoder reads for the no-passage candidate (``rerank_allow_no_passage``), in training and in
use alike."""


def choose_predictive(reranker, queries: Sequence[str], pools: Sequence[Sequence], config) -> list[int]:
    """The predictive reranker's choice per query: what evaluation (per window) and generation (per stride) choose
    with.

    Args:
        reranker: the cross-encoder ([`PredictiveReranker`][hf_ralm.selection.predictive.PredictiveReranker]).
        queries: the prefixes' texts.
        pools: per query, its passages ([`Passage`][hf_ralm.Passage]) in retrieval order.
        config: the settings: the passages are read as put in context (``config.passage_text``), and with
            ``config.rerank_allow_no_passage`` the empty passage
            ([`NO_PASSAGE_TEXT`][hf_ralm.selection.predictive.NO_PASSAGE_TEXT]) is one more candidate after them.

    Returns:
        Per query, the index of the passage of its pool that ``reranker`` scores highest, or -1 for none (an empty
            pool, or the empty passage scored highest).

    Examples:
        ```python
        choose_predictive(PredictiveReranker("models/reranker"), ["the emperor of"], [[rome, music]], config)  # [0]
        ```
    """
    extra = [NO_PASSAGE_TEXT] if config.rerank_allow_no_passage else []
    todo = [i for i, pool in enumerate(pools) if pool]
    texts = [[config.passage_text(p.title, p.text) for p in pools[i]] + extra for i in todo]
    chosen = [-1] * len(pools)
    for i, pick in zip(todo, reranker.choose([queries[i] for i in todo], texts)):
        chosen[i] = pick if pick < len(pools[i]) else -1
    return chosen


def argmax_first(values: Sequence[float]) -> int:
    """The index of the largest value, the first one on ties.

    Args:
        values: the values.

    Returns:
        The index, or -1 for an empty sequence.

    Examples:
        ```python
        argmax_first([0.5, 2.0, 2.0])  # -> 1
        ```
    """
    return max(range(len(values)), key=values.__getitem__, default=-1)


def _cross_encoder_class() -> type[CrossEncoder]:
    return require("sentence_transformers", "rerank", "The predictive reranker").CrossEncoder
