"""Reranking in generation (the paper's §6): at the start of a stride, which of a row's retrieved candidates goes in
context. :mod:`hf_ralm.generation` states the rules; the ranking inputs are scored by the evaluation's scorer
(:func:`~hf_ralm.scoring.score_inputs`) and, for another LM, built as the evaluation builds them
(:meth:`~hf_ralm.selection.rerank.LMReranker.inputs`).

Example:
    >>> ranking_start(num_tokens=40, rerank_tokens=16, starts=[10, 14])   # the last 16 tokens of x
    24
    >>> ranking_start(num_tokens=20, rerank_tokens=16, starts=[4, 9])     # never x's first token in a context
    10
    >>> chooser = StrideReranker(model, tokenizer, config, None, passage_cache, max_length=512)   # doctest: +SKIP
    >>> chooser.choose(rows, queries, candidates, stride_tokens=4, generated=8, reuse_prefix_kv=True)  # doctest: +SKIP
    [2, 0, -1]
"""

from __future__ import annotations

import zlib
from typing import Sequence

from ..configuration_ralm import RalmConfig
from ..passage_cache import PassageKVCache
from ..selection.rerank import LMReranker, choose_ranked, rerank_options
from ..selection.predictive import choose_predictive
from ..selection.rules import random_choice
from ..passages import NO_PASSAGE, Passage
from ..scoring import ScoredInput, score_inputs
from .contexts import Row, encode_passage, stride_start


def check_rerank(config: RalmConfig) -> None:
    """Raise a ``ValueError`` unless generation can rerank as ``config.rerank`` asks: the oracle needs the tokens a
    stride is about to generate. (An ensemble with reranking is refused by the config itself,
    :func:`~hf_ralm.configuration_ralm.check_ensemble`.)

    Example:
        >>> check_rerank(RalmConfig(rerank="oracle"))   # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: rerank='oracle' ranks the candidates on the very tokens they are to predict, ...
    """
    if config.rerank == "oracle":
        raise ValueError("rerank='oracle' ranks the candidates on the very tokens they are to predict, which "
                         "generation has not produced yet: generate with rerank='lm', 'predictive' or 'random' (the "
                         "oracle is for evaluation).")


def ranking_start(num_tokens: int, rerank_tokens: int, starts: Sequence[int]) -> int:
    """Where the ranking tokens of a stride begin in ``x`` (they end with it): the last ``rerank_tokens`` tokens,
    fewer when ``x`` or a candidate's context is shorter, so that none is the first token of ``x`` in any candidate's
    context ``[d_i; x[a_i:]]`` (``starts`` are the ``a_i``). Every candidate is ranked on the same tokens."""
    return max(num_tokens - rerank_tokens, max(starts) + 1)


def random_key(prompt_ids: Sequence[int], stride_index: int) -> int:
    """The key of :func:`~hf_ralm.selection.rules.random_choice` for stride ``j = stride_index`` of a row:
    ``crc32(prompt) · 2**32 + j``, the CRC-32 of the prompt's token ids written in decimal and joined by spaces. A
    row's choices depend on its prompt and the stride only, whatever the batch, its padding or its order.

    Example:
        >>> random_key([5, 6, 7], 2) == (zlib.crc32(b"5 6 7") << 32) + 2
        True
    """
    return (zlib.crc32(" ".join(str(i) for i in prompt_ids).encode()) << 32) + stride_index


def _check_reranker(config: RalmConfig, reranker) -> None:
    """``reranker`` is what ``config.rerank`` ranks with (see :class:`StrideReranker`)."""
    hint = "pass reranker=load_reranker(config, model) (RetrievalAugmentedModel.generate passes its own)"
    if config.rerank == "predictive" and reranker is None:
        raise ValueError(f"rerank='predictive' needs its trained reranker: {hint}.")
    if config.rerank != "lm":
        return
    if reranker is not None and not isinstance(reranker, LMReranker):
        raise ValueError(f"rerank='lm' ranks with the reader or with another LM (an LMReranker), got a "
                         f"{type(reranker).__name__}: {hint}.")
    if reranker is None and config.reranker_model is not None:
        raise ValueError(f"reranker_model={config.reranker_model!r} is to rank for rerank='lm', but no reranker was "
                         f"given: {hint}, or drop reranker_model to let the reader rank.")


class StrideReranker:
    """Chooses each row's passage among its candidates at the start of a stride, under ``config.rerank``
    (``"lm"``, ``"predictive"`` or ``"random"``; see :mod:`hf_ralm.generation`).

    ``reranker``: an :class:`~hf_ralm.selection.rerank.LMReranker` (``"lm"`` ranked by another LM, in text), a
    :class:`~hf_ralm.selection.predictive.PredictiveReranker` (``"predictive"``) or ``None`` (the reader ranks).
    ``passage_cache`` holds the reader's passages' keys/values, shared with the contexts the chosen passages open.
    """

    def __init__(self, model, tokenizer, config: RalmConfig, reranker, passage_cache: PassageKVCache,
                 max_length: int, batch_size: int = 8):
        check_rerank(config)
        _check_reranker(config, reranker)
        if batch_size < 1:
            raise ValueError(f"rerank_batch_size must be at least 1, got {batch_size}.")
        self.model, self.tokenizer, self.config, self.reranker = model, tokenizer, config, reranker
        self.passage_cache, self.max_length, self.batch_size = passage_cache, max_length, batch_size
        self.reranker_cache = PassageKVCache(reranker.model) if isinstance(reranker, LMReranker) else None

    def choose(self, rows: Sequence[Row], queries: Sequence[str], candidates: Sequence[Sequence[Passage]],
               stride_tokens: int, generated: int, reuse_prefix_kv: bool) -> list[int]:
        """Per row, the index of the chosen passage in its ``candidates`` (retrieval order), or
        :data:`~hf_ralm.selection.rules.NO_PASSAGE` (nothing retrieved, or no passage won) for a stride of
        ``stride_tokens`` tokens starting after ``generated`` generated tokens. The LM inputs of all rows run in one
        :func:`~hf_ralm.scoring.score_inputs` call (with ``reuse_prefix_kv``, passages' keys/values shared)."""
        todo = [i for i, pool in enumerate(candidates) if pool]
        chosen = [NO_PASSAGE] * len(rows)
        if not todo:
            return chosen
        pools = [list(candidates[i]) for i in todo]
        strategy = self.config.rerank
        if strategy == "random":
            stride_index = generated // self.config.retrieval_stride
            keys = [random_key(rows[i].ids[: rows[i].prompt_length], stride_index) for i in todo]
            picks = [random_choice(self.config.rerank_seed, key, len(pool)) for key, pool in zip(keys, pools)]
        elif strategy == "predictive":
            picks = choose_predictive(self.reranker, [queries[i] for i in todo], pools, self.config)
        else:
            picks = self._lm_choices([rows[i] for i in todo], pools, stride_tokens, reuse_prefix_kv)
        for i, pool, pick in zip(todo, pools, picks):
            chosen[i] = pick if 0 <= pick < len(pool) else NO_PASSAGE
        return chosen

    def _lm_choices(self, rows: list[Row], pools: list[list[Passage]], stride_tokens: int,
                    reuse_prefix_kv: bool) -> list[int]:
        """``"lm"``: per row, the index into its options (:func:`~hf_ralm.selection.rerank.rerank_options`) chosen on
        their ranking NLLs (:func:`~hf_ralm.selection.rerank.choose_ranked`); the first option when there is no token to
        rank on."""
        inputs, ranked = [], []
        for row, pool in zip(rows, pools):
            options = rerank_options(pool, self.config)
            prefixes = [tuple(encode_passage(self.tokenizer, option, self.config)) for option in options]
            starts = [stride_start(len(row.ids), stride_tokens, len(prefix), self.max_length) for prefix in prefixes]
            first = ranking_start(len(row.ids), self.config.rerank_tokens, starts)
            row_inputs = [] if first >= len(row.ids) else self._inputs(row, options, prefixes, starts, first)
            inputs.extend(row_inputs)
            ranked.append(options if row_inputs else [])
        model, cache = (self.model, self.passage_cache) if self.reranker is None else \
            (self.reranker.model, self.reranker_cache)
        nlls = iter(score_inputs(model, inputs, self.batch_size, reuse_prefix_kv,
                                 cache if reuse_prefix_kv else None))
        return [choose_ranked([float(next(nlls).sum()) for _ in options], options, self.config) if options else 0
                for options in ranked]

    def _inputs(self, row: Row, options: list[Passage | None], prefixes: list[tuple[int, ...]], starts: list[int],
                first: int) -> list[ScoredInput]:
        """The ranking inputs of a row's options: the reader's ``[d_i; x[a_i:]]`` scoring ``x[first:]``, or another
        LM's, in text."""
        if self.reranker is not None:
            decode = self.tokenizer.decode
            return self.reranker.inputs(decode(row.ids[:first]), decode(row.ids[first:]), options, self.config)
        inputs = []
        for prefix, start in zip(prefixes, starts):
            tokens = list(prefix) + row.ids[start:]
            inputs.append(ScoredInput(tokens, 0, len(tokens), prefix, len(prefix) + first - start))
        return inputs
