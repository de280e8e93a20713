"""Text generation with In-Context RALM: re-retrieve every ``s`` new tokens and decode on ``[passage; prefix]``.

Semantics (exact; ``s`` = ``retrieval_stride``, ``ℓ`` = ``query_length``, ``L`` = ``max_length``):

* Generation runs in strides of ``s`` tokens. At the start of stride ``j`` (after ``j·s`` generated tokens, ``j = 0``
  included) the query is the decoded last ``ℓ`` tokens of ``x`` = prompt + output so far, and the top passage
  ``d_j`` is retrieved, encoded as the evaluation does (:func:`hf_ralm.evaluation.passage_prefix`: the tokenizer's
  default special tokens, cut to ``max_doc_tokens``).
* Every token of stride ``j`` is predicted from ``[d_j; x[a_j:]]``, where ``x`` grows within the stride and
  ``a_j = max(0, len(x) + s_j + len(d_j) - L)`` with ``s_j = min(s, tokens still to generate)``, computed once at the
  start of the stride: the oldest tokens are dropped once per stride so that the whole stride fits in ``L``.
* A stride whose retrieval returns nothing uses ``x[a_j:]`` alone (``[BOS] + x[a_j:]`` with ``bos_every_window``).
* Each row of a batch retrieves for itself; padding (left or right, from ``attention_mask``) is not part of ``x``.

How it is computed: each row keeps the KV cache of its context ``[d_j; x[a_j:]]`` and feeds it only the tokens it
lacks. When the next stride has the same passage and the same ``a`` the context is unchanged and its cache simply
keeps growing; otherwise the context starts from the passage's keys/values, taken from a
:class:`~hf_ralm.passage_cache.PassageKVCache` (a passage sits at position 0, so its keys/values are the same for
every stride and row that uses it), and only ``x[a_j:]`` is prefilled. With ``use_cache=False`` every step runs the
whole context instead (the slow reference). A rebuilt context is prefilled row by row (each row has its own
passage and length); the steps where every row takes one token on a full-attention cache are run as one batch, the
rows' caches left-padded into one with an attention mask and each row's own positions (models with sliding-window
or other special cache layers stay row by row). Logits processors, stopping criteria and streamers see the whole
batch, as in ``transformers``.

The decoding loop is handed to ``transformers``' ``generate(custom_generate=...)``, so the generation config, the
logits processors/warpers (temperature, top-k/top-p, repetition penalty, user ``logits_processor``), the stopping
criteria (``max_new_tokens``, ``eos_token_id``, user ``stopping_criteria``, ``stop_strings``) and streamers are
prepared by ``transformers`` itself. Only greedy decoding and sampling (``num_beams=1``) are supported.

Example:
    >>> out = model.generate(ids, max_new_tokens=32, return_dict_in_generate=True)    # doctest: +SKIP
    >>> out.sources[0][0]                                                             # doctest: +SKIP
    {'start': 0, 'end': 4, 'id': '...', 'title': '...', 'text': '...', 'score': 12.3}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteriaList
from transformers.cache_utils import DynamicLayer
from transformers.generation import GenerateDecoderOnlyOutput
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.stopping_criteria import StopStringCriteria
from transformers.utils import logging

from .configuration_ralm import RalmConfig
from .evaluation import passage_prefix, resolve_max_length
from .modeling_utils import empty_cache, last_logits, model_device, one_logit_kwargs
from .passage_cache import DEFAULT_MAX_BYTES, PassageKVCache
from .retrieval.base import Passage, Retriever

logger = logging.get_logger(__name__)

__all__ = ["RalmGenerateOutput", "RalmLogitsProcessor", "encode_passage", "ralm_generate", "stride_start"]

# decode rows that each take one token per step in one left-padded batch (off: one forward per row, for tests)
_BATCH_STEPS = True


@dataclass
class RalmGenerateOutput(GenerateDecoderOnlyOutput):
    """``transformers``' decoder-only generate output plus, per row, the passages that were in context.

    ``sources[b]`` lists, for every stride of row ``b`` that had a passage in context, a dict ``{"start", "end",
    "id", "title", "text", "score"}``: the passage was in context for generated tokens ``[start, end)`` (indices into
    the row's generated tokens, i.e. ``sequences[b, prompt_length + start : prompt_length + end]``). ``ralm_stats``
    counts row-strides (``strides``, ``empty_retrievals``), ``passage_changes`` (strides after a row's first whose
    top passage differs from the previous stride's), contexts kept or rebuilt, the tokens run through the model
    (passages excluded), batched steps, and the passage cache's counters (``reused_tokens``: prefill it saved).
    """

    sources: list[list[dict]] | None = None
    ralm_stats: dict | None = None


def encode_passage(tokenizer, passage: Passage | None, config: RalmConfig) -> list[int]:
    """The token ids put in front of the text for ``passage`` (``None``: no passage), exactly as the evaluation puts
    them in front of a window: the passage with the tokenizer's default special tokens, cut to ``max_doc_tokens``."""
    return passage_prefix(tokenizer, passage, config)


def stride_start(num_tokens: int, stride_tokens: int, prefix_length: int, max_length: int) -> int:
    """``a_j``: how many of the oldest tokens of ``x`` stay out of context during a stride of ``stride_tokens`` tokens
    that starts with ``len(x) = num_tokens``, so that ``[passage; x[a_j:]]`` never exceeds ``max_length``."""
    return max(0, num_tokens + stride_tokens + prefix_length - max_length)


class _Context:
    """One context ``[prefix; x[start:]]`` of a row, with the KV cache of what has been run so far.

    ``fed`` is how far into ``x`` the cache reaches; ``logits`` are the next-token logits after the last token run
    (after the prefix when nothing of ``x`` has been run yet). Without a cache (``cache is None`` and ``rebuild``),
    every call runs the whole context.
    """

    __slots__ = ("prefix", "start", "cache", "fed", "logits", "rebuild")

    def __init__(self, prefix: tuple[int, ...], start: int, cache, logits, rebuild: bool = False):
        self.prefix, self.start, self.cache, self.logits, self.rebuild = prefix, start, cache, logits, rebuild
        self.fed = start

    def next_logits(self, model, ids: Sequence[int], stats: dict) -> torch.Tensor:
        device = model_device(model)
        if self.rebuild:
            context = list(self.prefix) + list(ids[self.start :])
            stats["forward_tokens"] += len(context)
            return last_logits(model, torch.tensor([context], device=device), 1)[0, -1]
        if self.cache is None:
            raise RuntimeError("This context's keys/values are held by a batch of rows.")
        pending = ids[max(self.start, self.fed) :]
        if pending:
            stats["forward_tokens"] += len(pending)
            pending_ids = torch.tensor([list(pending)], device=device)
            self.logits = last_logits(model, pending_ids, 1, past_key_values=self.cache)[0, -1]
            self.fed = len(ids)
        return self.logits


class _Row:
    """The decoding state of one row: ``ids`` (= ``x``), the contexts of the current stride and its sources."""

    def __init__(self, ids: Sequence[int]):
        self.ids = [int(i) for i in ids]
        if not self.ids:
            raise ValueError("Every prompt needs at least one token.")
        self.contexts: dict[tuple[tuple[int, ...], int], _Context] = {}
        self.mixture: list[tuple[float, _Context]] = []
        self.top_prefix: tuple[int, ...] | None = None
        self.sources: list[dict] = []
        self.open_sources: list[dict] = []

    def extend_sources(self, end: int) -> None:
        for source in self.open_sources:
            source["end"] = end


def _batchable(row: _Row) -> bool:
    """Whether the row's next step is one token on one plain (full-attention, dynamic) KV cache."""
    if len(row.mixture) != 1:
        return False
    context = row.mixture[0][1]
    cache = context.cache
    return (cache is not None and context.fed == len(row.ids) - 1 and context.start <= context.fed
            and cache.get_seq_length() > 0
            and all(type(layer) is DynamicLayer and layer.is_initialized for layer in cache.layers))


class _RowBatch:
    """Rows whose contexts each take one token per step, decoded together: their caches are left-padded into one,
    with an attention mask over the padding and each row's own positions. While batched, a context's own cache is
    ``None``; :meth:`dissolve` gives the contexts still in use their cache back."""

    def __init__(self, model, rows: list[_Row]):
        self.model, self.rows = model, rows
        self.contexts = [row.mixture[0][1] for row in rows]
        lengths = [context.cache.get_seq_length() for context in self.contexts]
        width = max(lengths)
        self.pads = [width - n for n in lengths]
        layers = []
        for i in range(len(self.contexts[0].cache.layers)):
            parts = [c.cache.layers[i] for c in self.contexts]
            keys = torch.cat([F.pad(p.keys, (0, 0, pad, 0)) for p, pad in zip(parts, self.pads)])
            values = torch.cat([F.pad(p.values, (0, 0, pad, 0)) for p, pad in zip(parts, self.pads)])
            layers.append((keys, values))
        self.cache = DynamicCache(ddp_cache_data=layers)
        device = model_device(model)
        self.mask = torch.tensor([[0] * pad + [1] * n for pad, n in zip(self.pads, lengths)], device=device)
        self.positions = torch.tensor(lengths, device=device)
        for context in self.contexts:
            context.cache = None

    def step(self, stats: dict) -> torch.Tensor:
        """Feed every row its last token; the next-token logits of every row."""
        device = self.mask.device
        tokens = torch.tensor([[row.ids[-1]] for row in self.rows], device=device)
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.rows), 1)], dim=1)
        logits = self.model(input_ids=tokens, attention_mask=self.mask, position_ids=self.positions[:, None],
                            past_key_values=self.cache, use_cache=True, **one_logit_kwargs(self.model)).logits[:, -1]
        self.positions = self.positions + 1
        stats["forward_tokens"] += len(self.rows)
        stats["batched_steps"] += 1
        for row, context, row_logits in zip(self.rows, self.contexts, logits):
            context.fed, context.logits = len(row.ids), row_logits
        return logits

    def select(self, rows: list[_Row]) -> None:
        """Keep only ``rows`` (a subset, in the same order)."""
        keep = [i for i, row in enumerate(self.rows) if any(row is r for r in rows)]
        index = torch.tensor(keep, device=self.mask.device)
        self.cache.batch_select_indices(index)
        self.mask, self.positions = self.mask[index], self.positions[index]
        self.rows = [self.rows[i] for i in keep]
        self.contexts = [self.contexts[i] for i in keep]
        self.pads = [self.pads[i] for i in keep]

    def dissolve(self, keep: set[int]) -> None:
        """Give each context whose ``id`` is in ``keep`` its own cache back (without the padding)."""
        for i, (context, pad) in enumerate(zip(self.contexts, self.pads)):
            if id(context) in keep:
                context.cache = DynamicCache(ddp_cache_data=[
                    (layer.keys[i : i + 1, :, pad:], layer.values[i : i + 1, :, pad:]) for layer in self.cache.layers
                ])
        self.cache = None


class _RalmDecoder:
    """The retrieval and the contexts of every row of a batch; shared by :func:`ralm_generate` and
    :class:`RalmLogitsProcessor`. With ``num_docs > 1`` (``ensemble``) each row keeps one context per passage and
    mixes their next-token distributions, weighted by the softmax of the retriever's scores."""

    def __init__(self, model, tokenizer, retriever: Retriever | None, config: RalmConfig,
                 passage_cache: PassageKVCache | None = None, use_cache: bool = True, num_docs: int = 1,
                 max_cache_bytes: int = DEFAULT_MAX_BYTES):
        config.validate_ralm_settings()
        if tokenizer is None:
            raise ValueError("Generation with retrieval needs the tokenizer (to decode queries and encode passages).")
        if passage_cache is not None and passage_cache.model is not model:
            raise ValueError("passage_cache was built for another model: its keys/values would be wrong here.")
        self.model, self.tokenizer, self.retriever, self.config = model, tokenizer, retriever, config
        self.max_length = resolve_max_length(model, config.max_length)
        if self.max_length <= config.retrieval_stride:
            raise ValueError(f"max_length ({self.max_length}) must be larger than retrieval_stride "
                             f"({config.retrieval_stride}).")
        self.use_cache = use_cache
        self.num_docs = num_docs
        self.passage_cache = passage_cache if passage_cache is not None else PassageKVCache(model, max_cache_bytes)
        self.batch_steps = _BATCH_STEPS
        self._batch: _RowBatch | None = None
        self.stats = {"strides": 0, "strides_with_passage": 0, "empty_retrievals": 0, "passage_changes": 0,
                      "contexts_kept": 0, "contexts_rebuilt": 0, "forward_tokens": 0, "batched_steps": 0}

    def _open(self, prefix: tuple[int, ...], start: int) -> _Context:
        self.stats["contexts_rebuilt"] += 1
        if not self.use_cache:
            return _Context(prefix, start, None, None, rebuild=True)
        if not prefix:
            return _Context(prefix, start, empty_cache(self.model), None)
        cache, logits = self.passage_cache.get(prefix)
        return _Context(prefix, start, cache, logits)

    def start_stride(self, rows: Sequence[_Row], stride_tokens: int, generated: int) -> None:
        """Retrieve for every row (one batched call) and set up the contexts of a stride of ``stride_tokens``
        tokens that starts after ``generated`` generated tokens."""
        if not rows:
            return
        queries = [self.tokenizer.decode(row.ids[-self.config.query_length :]) for row in rows]
        if self.retriever is None:
            found: list = [[] for _ in rows]
        else:
            found = self.retriever.retrieve(queries, k=self.num_docs)
            if len(found) != len(queries):
                raise ValueError(f"The retriever returned {len(found)} results for {len(queries)} queries.")
        for row, passages in zip(rows, found):
            passages = list(passages)[: self.num_docs]
            self.stats["strides"] += 1
            self.stats["strides_with_passage" if passages else "empty_retrievals"] += 1
            weights = _retrieval_weights(passages)
            contexts: dict[tuple[tuple[int, ...], int], _Context] = {}
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
            row.open_sources = [_source(p, generated, w if len(passages) > 1 else None)
                                for p, w in zip(passages, weights)]
            row.sources.extend(row.open_sources)
        self._dissolve_batch(rows)

    def _dissolve_batch(self, rows: Sequence[_Row]) -> None:
        if self._batch is not None:
            self._batch.dissolve({id(context) for row in rows for context in row.contexts.values()})
            self._batch = None

    def step(self, rows: list[_Row]) -> list[torch.Tensor]:
        """The next-token scores of every row (see :meth:`next_scores`). Rows that each take one token on a plain
        KV cache are decoded in one batch, kept across steps until a stride starts or a row stops."""
        batch = self._batch
        if batch is not None and [id(r) for r in batch.rows] != [id(r) for r in rows]:
            if {id(r) for r in rows} <= {id(r) for r in batch.rows}:
                batch.select(rows)
            else:
                self._dissolve_batch(batch.rows)
        if self._batch is None and self.batch_steps and len(rows) > 1 and all(_batchable(r) for r in rows):
            self._batch = _RowBatch(self.model, rows)
        if self._batch is not None:
            return list(self._batch.step(self.stats).float())
        return [self.next_scores(row) for row in rows]

    def next_scores(self, row: _Row) -> torch.Tensor:
        """Next-token logits of the row's context (float32); with several passages, the log of the mixture of
        their next-token probabilities."""
        if len(row.mixture) == 1:
            return row.mixture[0][1].next_logits(self.model, row.ids, self.stats).float()
        parts = [math.log(weight) + torch.log_softmax(context.next_logits(self.model, row.ids, self.stats).float(), -1)
                 for weight, context in row.mixture if weight > 0]
        return torch.logsumexp(torch.stack(parts), dim=0)

    def report(self) -> dict:
        return {**self.stats, "passage_cache": self.passage_cache.stats()}


def _retrieval_weights(passages: Sequence[Passage]) -> list[float]:
    if len(passages) <= 1:
        return [1.0]
    return torch.softmax(torch.tensor([float(p.score) for p in passages], dtype=torch.float64), 0).tolist()


def _source(passage: Passage, start: int, weight: float | None) -> dict:
    source = {"start": start, "end": start, "id": passage.id, "title": passage.title, "text": passage.text,
              "score": float(passage.score)}
    if weight is not None:
        source["weight"] = weight
    return source


def _row_ids(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[list[int]]:
    if attention_mask is None:
        return input_ids.tolist()
    return [[t for t, m in zip(ids, mask) if m] for ids, mask in zip(input_ids.tolist(), attention_mask.tolist())]


_SUPPORTED_MODES = (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE)


def _decode(model, input_ids, logits_processor: LogitsProcessorList, stopping_criteria: StoppingCriteriaList,
            generation_config: GenerationConfig, decoder: _RalmDecoder, streamer, model_kwargs: dict):
    """The decoding loop run inside ``generate``: ``transformers``' sampling loop, with the next-token logits of
    every row computed on its own ``[passage; x[a_j:]]``."""
    mode = generation_config.get_generation_mode()
    if mode not in _SUPPORTED_MODES:
        raise ValueError(
            f"RALM generation supports greedy decoding and sampling only (num_beams=1, no assistant, constraints or "
            f"contrastive search); got {mode.value!r} (num_beams={generation_config.num_beams}). Retrieval is done "
            "per row, not per beam: use num_beams=1 (with do_sample=True and num_return_sequences=n for several "
            "candidates)."
        )
    if generation_config.output_attentions or generation_config.output_hidden_states:
        logger.warning_once("RALM generation returns no attentions or hidden states (each row has its own context).")
    decoder.use_cache = decoder.use_cache and model_kwargs.get("use_cache", True) is not False
    batch_size, prompt_length = input_ids.shape
    rows = [_Row(ids) for ids in _row_ids(input_ids, model_kwargs.get("attention_mask"))]
    total = generation_config.max_length - prompt_length
    stride = decoder.config.retrieval_stride
    pad_token_id = generation_config._pad_token_tensor
    has_eos_stopping_criteria = any(hasattr(c, "eos_token_id") for c in stopping_criteria)
    return_dict = generation_config.return_dict_in_generate
    scores = () if return_dict and generation_config.output_scores else None
    raw_logits = () if return_dict and generation_config.output_logits else None
    unfinished = torch.ones(batch_size, dtype=torch.long, device=input_ids.device)
    if pad_token_id is not None:
        pad_token_id = pad_token_id.to(input_ids.device)

    generated = 0
    while generated < total:
        # rows whose next token will be replaced by padding need no forward
        running = [b for b in range(batch_size) if not has_eos_stopping_criteria or bool(unfinished[b])]
        if generated % stride == 0:
            decoder.start_stride([rows[b] for b in running], min(stride, total - generated), generated)
        running_logits = decoder.step([rows[b] for b in running])
        next_token_logits = running_logits[0].new_zeros(batch_size, running_logits[0].shape[-1])
        for b, row_logits in zip(running, running_logits):
            next_token_logits[b] = row_logits
            rows[b].extend_sources(generated + 1)
        next_token_logits = next_token_logits.to(input_ids.device)
        next_token_scores = logits_processor(input_ids, next_token_logits)
        if scores is not None:
            scores += (next_token_scores,)
        if raw_logits is not None:
            raw_logits += (next_token_logits,)

        if generation_config.do_sample:
            next_tokens = torch.multinomial(torch.softmax(next_token_scores, dim=-1), num_samples=1).squeeze(1)
        else:
            next_tokens = torch.argmax(next_token_scores, dim=-1)
        if has_eos_stopping_criteria:
            next_tokens = next_tokens * unfinished + pad_token_id * (1 - unfinished)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        for b, token in zip(running, next_tokens[running].tolist()):
            rows[b].ids.append(token)
        generated += 1

        unfinished = unfinished & ~stopping_criteria(input_ids, scores)
        if streamer is not None:
            streamer.put(next_tokens.cpu())
        if unfinished.max() == 0:
            break

    if streamer is not None:
        streamer.end()
    if not return_dict:
        return input_ids
    return RalmGenerateOutput(sequences=input_ids, scores=scores, logits=raw_logits,
                              sources=[row.sources for row in rows], ralm_stats=decoder.report())


def _encode_prompts(tokenizer, prompts: str | Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of text prompts (the tokenizer's default special tokens), left-padded, and their attention mask."""
    if tokenizer is None:
        raise ValueError("Text prompts need a tokenizer.")
    texts = [prompts] if isinstance(prompts, str) else list(prompts)
    encoded = [tokenizer(text)["input_ids"] for text in texts]
    width = max(len(ids) for ids in encoded)
    pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    ids = torch.tensor([[pad] * (width - len(e)) + list(e) for e in encoded])
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
    return ids, mask


def _is_text(inputs: Any) -> bool:
    return isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and bool(inputs)
                                       and all(isinstance(x, str) for x in inputs))


@torch.no_grad()
def ralm_generate(
    model,
    tokenizer,
    retriever: Retriever | None,
    config: RalmConfig,
    inputs: torch.Tensor | str | Sequence[str] | None = None,
    generation_config: GenerationConfig | None = None,
    logits_processor: LogitsProcessorList | None = None,
    stopping_criteria: StoppingCriteriaList | None = None,
    streamer=None,
    passage_cache: PassageKVCache | None = None,
    max_cache_bytes: int = DEFAULT_MAX_BYTES,
    **kwargs,
):
    """``model.generate(...)`` with In-Context RALM (see the module's docstring for the exact semantics).

    Takes what ``transformers``' ``generate`` takes (``input_ids``/``attention_mask``, ``generation_config`` or its
    fields as keyword arguments, ``logits_processor``, ``stopping_criteria``, ``streamer``,
    ``return_dict_in_generate``, ``output_scores``/``output_logits``); ``inputs`` may also be a text or a list of
    texts (tokenized with ``tokenizer``, left-padded). Returns the token ids, or a :class:`RalmGenerateOutput` with
    per-row ``sources`` when ``return_dict_in_generate=True``.

    Args:
        passage_cache: a :class:`~hf_ralm.passage_cache.PassageKVCache` of ``model`` to reuse passages' keys/values
            across calls; by default each call has its own, bounded by ``max_cache_bytes``.
        use_cache: ``False`` runs the whole ``[passage; x[a_j:]]`` at every step (the slow reference).
    """
    if "custom_generate" in kwargs:
        raise ValueError("RALM generation runs its own decoding loop: custom_generate cannot be combined with it.")
    if _is_text(inputs):
        inputs, mask = _encode_prompts(tokenizer, inputs)
        kwargs.setdefault("attention_mask", mask)
    elif _is_text(kwargs.get("input_ids")):
        kwargs["input_ids"], mask = _encode_prompts(tokenizer, kwargs["input_ids"])
        kwargs.setdefault("attention_mask", mask)

    # stop strings need the tokenizer, which generate does not hand to a custom decoding loop: build them here
    stop_strings = kwargs.pop("stop_strings", None)
    if stop_strings is None and generation_config is not None and generation_config.stop_strings is not None:
        stop_strings = generation_config.stop_strings
        generation_config = GenerationConfig.from_dict({**generation_config.to_dict(), "stop_strings": None})
    if stop_strings is not None:
        stop_tokenizer = kwargs.pop("tokenizer", None) or tokenizer
        stopping_criteria = StoppingCriteriaList(list(stopping_criteria or []))
        stopping_criteria.append(StopStringCriteria(tokenizer=stop_tokenizer, stop_strings=stop_strings))

    decoder = _RalmDecoder(model, tokenizer, retriever, config, passage_cache, max_cache_bytes=max_cache_bytes)

    def decode(model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
        return _decode(model, input_ids, logits_processor, stopping_criteria, generation_config, decoder, streamer,
                       model_kwargs)

    return model.generate(inputs, generation_config=generation_config, logits_processor=logits_processor,
                          stopping_criteria=stopping_criteria, streamer=streamer, custom_generate=decode, **kwargs)


class RalmLogitsProcessor(LogitsProcessor):
    """In-Context RALM as a ``transformers`` logits processor, for any ``model.generate(logits_processor=[...])``.

    Every ``s`` generated tokens it retrieves (the query is the last ``ℓ`` tokens of the ``input_ids`` it receives)
    and at every step it *returns* the reader's next-token log-probabilities computed on ``[passage; x[a_j:]]``,
    exactly as :func:`ralm_generate` computes them (its own KV caches, reused the same way), whatever scores it
    receives: the generating model only supplies the loop. ``num_docs=k`` with ``ensemble=True`` mixes the
    next-token probabilities of the ``k`` passages, weighted by the softmax of the retriever's scores (REPLUG-style).

    Notes:
        * It replaces the scores, so processors that run before it are lost. ``generate`` runs the processors it
          builds from the generation config (e.g. ``repetition_penalty``) before the user's: pass such processors
          yourself, after this one. Temperature/top-k/top-p warpers run after it and apply as usual.
        * ``generate`` does not tell processors how many tokens it will generate: give ``max_new_tokens`` to
          shorten the last stride exactly as :func:`ralm_generate` does; without it every stride counts ``s``
          tokens (which only changes which oldest tokens the last stride drops).
        * Leading ``pad_token_id`` tokens (left padding) of the first ``input_ids`` are not part of a row's text.
        * A new generation is detected when ``input_ids`` is not the previous call's plus one token; :meth:`reset`
          forces it.
        * The returned log-probabilities cover the reader's vocabulary, cut or padded with ``-inf`` to the width
          of the scores it receives (so the two models must share the tokenizer).
    """

    def __init__(self, reader_model, tokenizer, retriever: Retriever | None, config: RalmConfig, num_docs: int = 1,
                 ensemble: bool = False, max_new_tokens: int | None = None, pad_token_id: int | None = -1,
                 passage_cache: PassageKVCache | None = None, max_cache_bytes: int = DEFAULT_MAX_BYTES):
        if num_docs < 1:
            raise ValueError(f"num_docs must be at least 1, got {num_docs}.")
        if num_docs > 1 and not ensemble:
            raise ValueError("Only the top passage is put in context: num_docs > 1 needs ensemble=True.")
        self.decoder = _RalmDecoder(reader_model, tokenizer, retriever, config, passage_cache, num_docs=num_docs,
                                    max_cache_bytes=max_cache_bytes)
        self.max_new_tokens = max_new_tokens
        self.pad_token_id = tokenizer.pad_token_id if pad_token_id == -1 else pad_token_id
        self.rows: list[_Row] = []
        self._seen: torch.Tensor | None = None
        self._prompt_length = 0

    @property
    def sources(self) -> list[list[dict]]:
        """Per row of the current (or last) generation, the passages in context and the generated tokens they
        predicted, as in :attr:`RalmGenerateOutput.sources`."""
        return [row.sources for row in self.rows]

    @property
    def stats(self) -> dict:
        return self.decoder.report()

    def reset(self) -> None:
        """Forget the current generation (the next call starts a new one)."""
        self.rows, self._seen = [], None
        self.decoder._batch = None

    def _continues(self, input_ids: torch.Tensor) -> bool:
        seen = self._seen
        return (seen is not None and input_ids.shape[0] == seen.shape[0] and input_ids.shape[1] == seen.shape[1] + 1
                and torch.equal(input_ids[:, :-1], seen))

    def _begin(self, input_ids: torch.Tensor) -> None:
        self.reset()
        rows = []
        for ids in input_ids.tolist():
            skip = 0
            while self.pad_token_id is not None and skip < len(ids) - 1 and ids[skip] == self.pad_token_id:
                skip += 1
            rows.append(_Row(ids[skip:]))
        self.rows, self._prompt_length = rows, input_ids.shape[1]

    @torch.no_grad()
    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._continues(input_ids):
            for row, token in zip(self.rows, input_ids[:, -1].tolist()):
                row.ids.append(token)
        else:
            self._begin(input_ids)
        self._seen = input_ids
        generated = input_ids.shape[1] - self._prompt_length
        stride = self.decoder.config.retrieval_stride
        if generated % stride == 0:
            left = stride if self.max_new_tokens is None else self.max_new_tokens - generated
            self.decoder.start_stride(self.rows, max(1, min(stride, left)), generated)
        out = torch.full_like(scores, float("-inf"))
        width = scores.shape[-1]
        for b, (row, row_scores) in enumerate(zip(self.rows, self.decoder.step(self.rows))):
            log_probs = torch.log_softmax(row_scores, dim=-1)
            keep = min(width, log_probs.shape[-1])
            out[b, :keep] = log_probs[:keep].to(out.device, out.dtype)
            row.extend_sources(generated + 1)
        return out
