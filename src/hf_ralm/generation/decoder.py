"""Retrieval, reranking and ensembling for generation: every ``s`` tokens each row retrieves, chooses its passage(s)
(the selection policy, an LM ranking through ``ranker``), puts them in front of its text and predicts the next
token from ``[passage; x[a_j:]]`` (see ``hf_ralm.generation`` for the exact semantics). ``RalmDecoder`` is
shared by ``ralm_generate`` and [`RalmLogitsProcessor`][hf_ralm.RalmLogitsProcessor].

Examples:
    ```python
    decoder = RalmDecoder(model, tokenizer, retriever, config)
    rows = [Row(tokenizer("The Eiffel tower")["input_ids"])]
    decoder.start_stride(rows, stride_tokens=4, generated=0)
    decoder.step(rows)[0].argmax()   # the top passage's next-token choice
    ```
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

import torch

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..config.configuration_ralm import RalmConfig, check_ensemble
from ..core.ensemble import ensemble_log_weights
from ..errors import SettingError, setting
from ..core.model_inputs import context_indices, context_prefix
from ..core.plan import window_length
from ..core.engines.reader import engine_reader
from ..core.modeling_utils import empty_cache
from ..core.passage_cache import DEFAULT_MAX_BYTES, PassageKVCache
from ..core.passages import Passage
from ..retrieval.base import Retriever
from ..selection.policy import PassagePolicy
from ..selection.strategies import check_generation
from ..config.strategy_settings import reranks
from ..utils.checks import check_count
from ..utils.stage_times import StageTimes
from ..core.strides import Strides, query_tokens, stride_start
from .contexts import Context, Row, RowBatch, pending_tokens
from .ranker import StrideRanker, random_key


def retrieval_weights(passages: Sequence[Passage], temperature: float = 1.0) -> list[float]:
    """The mixture weights of a row's passages: the softmax of their retrieval scores divided by ``temperature``
    (the evaluation's, ``ensemble_log_weights``), ``[1.0]`` for one or none."""
    if len(passages) <= 1:
        return [1.0]
    return ensemble_log_weights([p.score for p in passages], temperature).exp().tolist()


def source_record(passage: Passage, start: int, weight: float | None, rank: int | None = None) -> dict:
    """What ``RalmGenerateOutput.sources`` lists for a passage put in context from generated token ``start``
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

    Each stride puts the row's top ``config.num_passages`` passages in one context
    ([`context_prefix`][hf_ralm.core.model_inputs.context_prefix]), or with ``config.rerank`` the candidate the
    ``PassagePolicy`` chooses first, ranked by a ``StrideRanker`` (``reranker``: what ranks when the reader does not;
    ``rerank_batch_size``: the ranking inputs per forward). With ``ensemble_size = n > 1`` (default:
    ``config.ensemble_size``) each row keeps one context per passage of its top ``n`` and mixes their next-token
    distributions, weighted by the softmax of the retriever's scores over ``config.ensemble_temperature``
    (REPLUG-style). ``config.retrieval_gate`` decides whether a stride retrieves at all, as in evaluation (the same
    policy, ``hf_ralm.selection.gates``: the score gate before reranking, the lm gate, a two-candidate ranking, after
    it). A stride without a passage resumes the row's last context without one when it starts at the same place
    (``keep_plain_context``; its cache then only takes the tokens generated since). ``use_cache=False`` runs the whole
    context at every step (the slow reference). """

    def __init__(self, model, tokenizer, retriever: Retriever | None, config: RalmConfig,
                 passage_cache: PassageKVCache | None = None, *, use_cache: bool = True,
                 ensemble_size: int | None = None, max_cache_bytes: int = DEFAULT_MAX_BYTES, reranker=None,
                 rerank_batch_size: int = DEFAULT_BATCH_SIZE, keep_plain_context: bool = True):
        config.validate()
        if tokenizer is None:
            raise ValueError("Generation with retrieval needs the tokenizer (to decode queries and encode passages).")
        if ensemble_size is None:
            ensemble_size = config.ensemble_size
        if isinstance(ensemble_size, bool) or not isinstance(ensemble_size, int) or ensemble_size < 1:
            raise SettingError(f"{setting('ensemble_size')} must be a positive integer (1: only the top passage in "
                               "context; n > 1: mix the next-token probabilities of the top n passages), got "
                               f"{ensemble_size!r}.")
        check_ensemble(config, ensemble_size)
        check_generation(config)
        self.model, self.tokenizer, self.retriever, self.config = model, tokenizer, retriever, config
        self.max_length = window_length(model, config, retrieving=retriever is not None)
        # an engine reader's contexts run in its engine (generation/engine.py): the decoder only retrieves and
        # chooses their passages, so no keys/values are computed for them here
        self.use_cache = use_cache and engine_reader(model) is None
        self.keep_plain_context = keep_plain_context
        self.ensemble_size = ensemble_size
        self.passage_cache = PassageKVCache.for_model(model, passage_cache, max_cache_bytes)
        self.policy = PassagePolicy(config, retriever, reranker)
        check_count("rerank_batch_size", rerank_batch_size)
        self.rerank_batch_size = rerank_batch_size
        self.lm_caches: dict = {}  # another LM's passages' keys/values, kept across strides
        self._batch: RowBatch | None = None
        self.stats = {"strides": 0, "strides_with_passage": 0, "empty_retrievals": 0, "reranked_strides": 0,
                      "no_passage_chosen": 0, "gated_strides": 0, "passage_changes": 0, "contexts_kept": 0,
                      "contexts_rebuilt": 0, "plain_contexts_resumed": 0, "plain_tokens_reused": 0,
                      "forward_tokens": 0, "batched_steps": 0}
        self.times = StageTimes()  # a decoding loop's time is the reader's, but for what retrieval takes of it
        self._loop_start: tuple[float, float] | None = None  # the open loop's start, and retrieval's seconds then

    def reset(self) -> None:
        """Forget the rows being decoded, before a new generation; the passage cache and the counters stay."""
        self._batch = None

    def _open(self, prefix: tuple[int, ...], start: int, opened: list[Context]) -> Context:
        """A new context; one with a passage gets its keys/values from ``_fill`` (``opened`` lists it), so that
        a stride's new passages are computed together."""
        self.stats["contexts_rebuilt"] += 1
        if not self.use_cache:
            return Context(prefix, start, None, None, rebuild=True)
        if not prefix:
            return Context(prefix, start, empty_cache(self.model), None)
        context = Context(prefix, start, None, None)
        opened.append(context)
        return context

    def _fill(self, opened: list[Context]) -> None:
        """The passages' keys/values of the contexts a stride opened (a copy each: a context extends its own), those
        the store lacks computed in one forward per passage length."""
        if not opened:  # none without use_cache (an engine reader's decoder has no store)
            return
        for context, (cache, logits) in zip(opened, self.passage_cache.prefill([c.prefix for c in opened])):
            context.cache, context.logits = copy.deepcopy(cache), logits

    @contextmanager
    def decoding(self) -> Iterator[None]:
        """Time a decoding loop: what retrieval does not take of it (the reader's passes, choosing passages, building
        contexts) is the reader's."""
        self._loop_start = (time.perf_counter(), self.times.retrieval_s)
        try:
            yield
        finally:
            self.times = self.stage_times()
            self._loop_start = None

    def stage_times(self) -> StageTimes:
        """Retrieval's seconds and the reader's so far (an open ``decoding`` loop's included)."""
        if self._loop_start is None:
            return StageTimes(self.times.retrieval_s, self.times.reader_s)
        started, retrieval_then = self._loop_start
        spent = time.perf_counter() - started - (self.times.retrieval_s - retrieval_then)
        return StageTimes(self.times.retrieval_s, self.times.reader_s + spent)

    def _retrieve(self, queries: list[str]) -> list[list[Passage]]:
        """Every row's passages: its top ``num_passages`` or ``ensemble_size``, or with reranking its
        ``rerank_candidates``."""
        reranking = reranks(self.config.rerank)
        k = self.config.num_retrieved if reranking else max(self.config.num_passages, self.ensemble_size)
        if self.retriever is None:
            return [[] for _ in queries]
        found = self.retriever.retrieve(queries, k=k)
        if len(found) != len(queries):
            raise ValueError(f"The retriever returned {len(found)} results for {len(queries)} queries.")
        return [list(passages)[:k] for passages in found]

    def _choose(self, rows: Sequence[Row], queries: list[str], found: list[list[Passage]], stride_tokens: int,
                generated: int) -> list[tuple[list[Passage], list[int | None]]]:
        """Per row, the passages put in context (or mixed), most relevant first, and their ranks among the candidates
        (``None`` each when not reranked): the policy's choice (score gate, reranking, lm gate; as evaluation
        chooses), then [`context_indices`][hf_ralm.core.model_inputs.context_indices]."""
        ranker = StrideRanker(self.model, self.tokenizer, rows, stride_tokens, self.max_length,
                              passage_cache=self.passage_cache,
                              lm_caches=self.lm_caches, batch_size=self.rerank_batch_size,
                              reuse_prefix_kv=self.use_cache)
        stride_index = Strides(self.config.retrieval_stride).index(generated)
        keys = [random_key(row.ids[: row.prompt_length], stride_index) for row in rows]
        selection = self.policy.select(queries, found, ranker, keys)
        reranking = reranks(self.config.rerank)
        self.stats["gated_strides"] += sum(selection.gated)
        if reranking:
            self.stats["reranked_strides"] += sum(selection.reranked)
            self.stats["no_passage_chosen"] += sum(selection.none_chosen)
        size = max(self.config.num_passages, self.ensemble_size)
        choices = []
        for passages, rank in zip(found, selection.chosen):
            indices = context_indices(rank, len(passages), size)
            choices.append(([passages[i] for i in indices], indices if reranking else [None] * len(indices)))
        return choices

    def _context(self, row: Row, contexts: dict, prefix: tuple[int, ...], start: int, opened: list[Context]
                 ) -> Context:
        """The context ``[prefix; x[start:]]`` of a row for the new stride: one of this stride's, the previous
        stride's (kept), the row's last one without a passage (resumed) or a new one."""
        key = (prefix, start)
        if key in contexts:
            return contexts[key]
        context = row.contexts.get(key)
        if context is not None:
            self.stats["contexts_kept"] += 1
        elif row.plain is not None and (row.plain.prefix, row.plain.start) == key:
            context = row.plain
            self.stats["plain_contexts_resumed"] += 1
            self.stats["plain_tokens_reused"] += context.fed - context.start
        else:
            context = self._open(prefix, start, opened)
        contexts[key] = context
        return context

    def start_stride(self, rows: Sequence[Row], stride_tokens: int, generated: int,
                     queries: Sequence[str] | None = None) -> None:
        """Retrieve for every row (one batched call), choose its passages (gates, reranking), and set up the contexts
        of a stride of ``stride_tokens`` tokens that starts after ``generated`` generated tokens. ``queries``: what
        each row retrieves with instead of its decoded last ``query_length`` tokens (e.g. a question)."""
        if not rows:
            return
        if queries is None:
            query_length = self.config.query_length_for(self.retriever)
            queries = [self.tokenizer.decode(query_tokens(row.ids, query_length)) for row in rows]
        queries = list(queries)
        with self.times.timing("retrieval"):
            found = self._retrieve(queries)
        choices = self._choose(rows, queries, found, stride_tokens, generated)
        mixing = self.ensemble_size > 1
        opened: list[Context] = []
        for row, retrieved, (passages, ranks) in zip(rows, found, choices):
            self.stats["strides"] += 1
            self.stats["empty_retrievals"] += not retrieved
            self.stats["strides_with_passage"] += bool(passages)
            weights = retrieval_weights(passages, self.config.ensemble_temperature) if mixing else [1.0]
            members = [[p] for p in passages] if mixing and passages else [passages]
            contexts: dict[tuple[tuple[int, ...], int], Context] = {}
            row.mixture = []
            for member, weight in zip(members, weights):
                prefix = tuple(context_prefix(self.tokenizer, member, self.config))
                start = stride_start(len(row.ids), stride_tokens, len(prefix), self.max_length)
                row.mixture.append((weight, self._context(row, contexts, prefix, start, opened)))
            if not passages and self.use_cache and self.keep_plain_context:
                row.plain = row.mixture[0][1]
            if row.top_prefix is not None and row.mixture[0][1].prefix != row.top_prefix:
                self.stats["passage_changes"] += 1
            row.top_prefix = row.mixture[0][1].prefix
            row.contexts = contexts
            shown = weights if mixing and len(passages) > 1 else [None] * len(passages)
            row.open_sources = [source_record(p, generated, w, rank) for p, w, rank in zip(passages, shown, ranks)]
            row.sources.extend(row.open_sources)
        self._fill(opened)
        self._dissolve_batch(rows)

    def _dissolve_batch(self, rows: Sequence[Row]) -> None:
        if self._batch is not None:
            kept = {id(context) for row in rows for context in [*row.contexts.values(), row.plain] if context}
            self._batch.dissolve(kept)
            self._batch = None

    def step(self, rows: list[Row]) -> list[torch.Tensor]:
        """The next-token scores of every row (see ``next_scores``). Rows whose contexts each lack as many tokens
        on a plain KV cache (one a step; at a stride's start, what each new context lacks) are decoded in one batch,
        kept across steps until a stride starts or a row stops."""
        batch = self._batch
        if batch is not None and [id(r) for r in batch.rows] != [id(r) for r in rows]:
            if {id(r) for r in rows} <= {id(r) for r in batch.rows}:
                batch.select(rows)
            else:
                self._dissolve_batch(batch.rows)
        if self._batch is None and len(rows) > 1:
            pending = {pending_tokens(r) for r in rows}
            if len(pending) == 1 and None not in pending:  # every row lacks as many tokens on a plain cache
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
        """The decoding counters (see [`RalmGenerateOutput`][hf_ralm.RalmGenerateOutput]), the share of row-strides that
        had a passage in context (``retrieved_fraction``), the passage cache's counters, and the seconds of retrieval
        and of the reader (``retrieval_s``, ``reader_s``: ``stage_times``)."""
        strides = self.stats["strides"]
        fraction = self.stats["strides_with_passage"] / strides if strides else None
        # an engine reader keeps no passages' keys/values here: no store, no counters
        cache = self.passage_cache.stats() if self.passage_cache is not None else None
        return {**self.stats, "retrieved_fraction": fraction, "passage_cache": cache, **self.stage_times().to_dict()}
