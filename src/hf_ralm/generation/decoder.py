"""Retrieval, reranking and ensembling for generation: every ``s`` tokens each row retrieves, chooses its passage(s)
(reranking: :mod:`.reranking`), puts them in front of its text and predicts the next token from
``[passage; x[a_j:]]`` (see :mod:`hf_ralm.generation` for the exact semantics). :class:`RalmDecoder` is shared by
:func:`~hf_ralm.generation.ralm_generate` and :class:`~hf_ralm.generation.RalmLogitsProcessor`.

Example:
    >>> decoder = RalmDecoder(model, tokenizer, retriever, config)               # doctest: +SKIP
    >>> rows = [Row(tokenizer("The Eiffel tower")["input_ids"])]                # doctest: +SKIP
    >>> decoder.start_stride(rows, stride_tokens=4, generated=0)                 # doctest: +SKIP
    >>> decoder.step(rows)[0].argmax()   # the top passage's next-token choice   # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..configuration_ralm import RalmConfig
from ..model_inputs import window_length
from ..modeling_utils import empty_cache
from ..passage_cache import DEFAULT_MAX_BYTES, PassageKVCache
from ..reranking.rules import NO_PASSAGE
from ..retrieval.base import Passage, Retriever
from .contexts import Context, Row, RowBatch, batchable, encode_passage, stride_start
from .reranking import StrideReranker, check_rerank


def retrieval_weights(passages: Sequence[Passage]) -> list[float]:
    """The mixture weights of a row's passages: the softmax of their retrieval scores (``[1.0]`` for one or none)."""
    if len(passages) <= 1:
        return [1.0]
    return torch.softmax(torch.tensor([float(p.score) for p in passages], dtype=torch.float64), 0).tolist()


def source_record(passage: Passage, start: int, weight: float | None, rank: int | None = None) -> dict:
    """What :attr:`RalmGenerateOutput.sources` lists for a passage put in context from generated token ``start``
    (with its mixture ``weight`` in an ensemble, its ``rank`` among the candidates when reranked)."""
    source = {"start": start, "end": start, "id": passage.id, "title": passage.title, "text": passage.text,
              "score": float(passage.score)}
    if weight is not None:
        source["weight"] = weight
    if rank is not None:
        source["rank"] = rank
    return source


class RalmDecoder:
    """The retrieval and the contexts of every row of a batch.

    With ``ensemble_size = n > 1`` each row keeps one context per passage of its top ``n`` and mixes their
    next-token distributions, weighted by the softmax of the retriever's scores (REPLUG-style); with 1 only the top
    passage is in context, or with ``config.rerank`` the candidate a :class:`~.reranking.StrideReranker` chooses
    (``reranker``: what ranks when the reader does not; ``rerank_batch_size``: the ranking inputs per forward).
    ``use_cache=False`` runs the whole context at every step (the slow reference).
    """

    def __init__(self, model, tokenizer, retriever: Retriever | None, config: RalmConfig,
                 passage_cache: PassageKVCache | None = None, use_cache: bool = True, ensemble_size: int = 1,
                 max_cache_bytes: int = DEFAULT_MAX_BYTES, reranker=None, rerank_batch_size: int = 8):
        config.validate()
        if tokenizer is None:
            raise ValueError("Generation with retrieval needs the tokenizer (to decode queries and encode passages).")
        if isinstance(ensemble_size, bool) or not isinstance(ensemble_size, int) or ensemble_size < 1:
            raise ValueError(f"ensemble_size must be a positive integer (1: only the top passage in context; n > 1: "
                             f"mix the next-token probabilities of the top n passages), got {ensemble_size!r}.")
        check_rerank(config, ensemble_size)
        self.model, self.tokenizer, self.retriever, self.config = model, tokenizer, retriever, config
        self.max_length = window_length(model, config)
        self.use_cache = use_cache
        self.ensemble_size = ensemble_size
        self.passage_cache = PassageKVCache.for_model(model, passage_cache, max_cache_bytes)
        self.stride_reranker = None if config.rerank == "none" else StrideReranker(
            model, tokenizer, config, reranker, self.passage_cache, self.max_length, rerank_batch_size)
        self._batch: RowBatch | None = None
        self.stats = {"strides": 0, "strides_with_passage": 0, "empty_retrievals": 0, "reranked_strides": 0,
                      "no_passage_chosen": 0, "passage_changes": 0, "contexts_kept": 0, "contexts_rebuilt": 0,
                      "forward_tokens": 0, "batched_steps": 0}

    def reset(self) -> None:
        """Forget the rows being decoded, before a new generation; the passage cache and the counters stay."""
        self._batch = None

    def _open(self, prefix: tuple[int, ...], start: int) -> Context:
        self.stats["contexts_rebuilt"] += 1
        if not self.use_cache:
            return Context(prefix, start, None, None, rebuild=True)
        if not prefix:
            return Context(prefix, start, empty_cache(self.model), None)
        cache, logits = self.passage_cache.get(prefix)
        return Context(prefix, start, cache, logits)

    def _retrieve(self, queries: list[str]) -> list[list[Passage]]:
        """Every row's passages: its top ``ensemble_size``, or with reranking its ``rerank_candidates``."""
        k = self.ensemble_size if self.stride_reranker is None else self.config.num_retrieved
        if self.retriever is None:
            return [[] for _ in queries]
        found = self.retriever.retrieve(queries, k=k)
        if len(found) != len(queries):
            raise ValueError(f"The retriever returned {len(found)} results for {len(queries)} queries.")
        return [list(passages)[:k] for passages in found]

    def _choose(self, rows: Sequence[Row], queries: list[str], found: list[list[Passage]], stride_tokens: int,
                generated: int) -> list[tuple[list[Passage], int | None]]:
        """Per row, the passages put in context and, when reranked, the chosen one's rank among the candidates."""
        if self.stride_reranker is None:
            return [(passages, None) for passages in found]
        ranks = self.stride_reranker.choose(rows, queries, found, stride_tokens, generated, self.use_cache)
        self.stats["reranked_strides"] += sum(1 for passages in found if passages)
        self.stats["no_passage_chosen"] += sum(1 for passages, rank in zip(found, ranks)
                                               if passages and rank == NO_PASSAGE)
        return [([passages[rank]] if rank != NO_PASSAGE else [], rank) for passages, rank in zip(found, ranks)]

    def start_stride(self, rows: Sequence[Row], stride_tokens: int, generated: int) -> None:
        """Retrieve for every row (one batched call), choose its passage when reranking, and set up the contexts
        of a stride of ``stride_tokens`` tokens that starts after ``generated`` generated tokens."""
        if not rows:
            return
        query_length = self.config.query_length_for(self.retriever)
        queries = [self.tokenizer.decode(row.ids[-query_length:]) for row in rows]
        found = self._retrieve(queries)
        choices = self._choose(rows, queries, found, stride_tokens, generated)
        for row, retrieved, (passages, rank) in zip(rows, found, choices):
            self.stats["strides"] += 1
            self.stats["empty_retrievals"] += not retrieved
            self.stats["strides_with_passage"] += bool(passages)
            weights = retrieval_weights(passages)
            contexts: dict[tuple[tuple[int, ...], int], Context] = {}
            row.mixture = []
            for passage, weight in zip(passages or [None], weights):
                prefix = tuple(encode_passage(self.tokenizer, passage, self.config))
                start = stride_start(len(row.ids), stride_tokens, len(prefix), self.max_length)
                key = (prefix, start)
                context = contexts.get(key) or row.contexts.get(key)
                if context is None:
                    context = self._open(prefix, start)
                elif key not in contexts:
                    self.stats["contexts_kept"] += 1
                contexts[key] = context
                row.mixture.append((weight, context))
            if row.top_prefix is not None and row.mixture[0][1].prefix != row.top_prefix:
                self.stats["passage_changes"] += 1
            row.top_prefix = row.mixture[0][1].prefix
            row.contexts = contexts
            row.open_sources = [source_record(p, generated, w if len(passages) > 1 else None, rank)
                                for p, w in zip(passages, weights)]
            row.sources.extend(row.open_sources)
        self._dissolve_batch(rows)

    def _dissolve_batch(self, rows: Sequence[Row]) -> None:
        if self._batch is not None:
            self._batch.dissolve({id(context) for row in rows for context in row.contexts.values()})
            self._batch = None

    def step(self, rows: list[Row]) -> list[torch.Tensor]:
        """The next-token scores of every row (see :meth:`next_scores`). Rows that each take one token on a plain
        KV cache are decoded in one batch, kept across steps until a stride starts or a row stops."""
        batch = self._batch
        if batch is not None and [id(r) for r in batch.rows] != [id(r) for r in rows]:
            if {id(r) for r in rows} <= {id(r) for r in batch.rows}:
                batch.select(rows)
            else:
                self._dissolve_batch(batch.rows)
        if self._batch is None and len(rows) > 1 and all(batchable(r) for r in rows):
            self._batch = RowBatch(self.model, rows)
        if self._batch is not None:
            return list(self._batch.step(self.stats).float())
        return [self.next_scores(row) for row in rows]

    def next_scores(self, row: Row) -> torch.Tensor:
        """Next-token logits of the row's context (float32); with several passages, the log of the mixture of
        their next-token probabilities."""
        if len(row.mixture) == 1:
            return row.mixture[0][1].next_logits(self.model, row.ids, self.stats).float()
        parts = [math.log(weight) + torch.log_softmax(context.next_logits(self.model, row.ids, self.stats).float(), -1)
                 for weight, context in row.mixture if weight > 0]
        return torch.logsumexp(torch.stack(parts), dim=0)

    def report(self) -> dict:
        """The decoding counters (see :class:`~hf_ralm.generation.RalmGenerateOutput`) and the passage cache's."""
        return {**self.stats, "passage_cache": self.passage_cache.stats()}
