"""Per-row decoding state: the KV-cached contexts ``[passage; x[start:]]`` of each row (what a passage puts in front
of ``x``, ``encode_passage``, and where ``x`` starts,
[`stride_start`][hf_ralm.core.strides.stride_start]), and the batch that decodes rows
together while each lacks as many tokens.

A row's context keeps the KV cache of what has been run so far and is only fed the tokens it lacks; when every row
lacks as many tokens on a plain full-attention cache (one a step, or at a stride's start the text after each row's
new passage), the rows' caches are left-padded into one and run in a single forward (``RowBatch``), with an
attention mask over the padding and each row's own positions.

Examples:
    >>> from hf_ralm.core.modeling_utils import empty_cache
    >>> row = Row([5, 6, 7])
    >>> context = Context((), 0, empty_cache(model), None)                        # doctest: +SKIP
    >>> context.next_logits(model, row.ids, stats).shape   # runs [5, 6, 7]      # doctest: +SKIP
    torch.Size([49152])
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from ..config.configuration_ralm import RalmConfig
from ..core.model_inputs import passage_prefix
from ..core.modeling_utils import cache_kwargs, last_logits, model_device, one_logit_kwargs
from ..core.passages import Passage


def encode_passage(tokenizer, passage: Passage | None, config: RalmConfig) -> list[int]:
    """The token ids put in front of the text for ``passage`` (``None``: no passage), exactly as the evaluation puts
    them in front of a window: the passage with the tokenizer's default special tokens, cut to ``max_doc_tokens``.

    Examples:
        ```python
        encode_passage(tokenizer, Passage("a1", "Rome", "Rome is ...", 9.1), config)[:3]   # [1, 27385, 198]
        ```
    """
    return passage_prefix(tokenizer, passage, config)


class Context:
    """One context ``[prefix; x[start:]]`` of a row, with the KV cache of what has been run so far.

    ``fed`` is how far into ``x`` the cache reaches; ``logits`` are the next-token logits after the last token run
    (after the prefix when nothing of ``x`` has been run yet). Without a cache (``cache is None`` and ``rebuild``),
    every call runs the whole context.
    """

    __slots__ = ("prefix", "start", "cache", "fed", "logits", "rebuild")

    def __init__(self, prefix: tuple[int, ...], start: int, cache: DynamicCache | None, logits: torch.Tensor | None,
                 rebuild: bool = False):
        self.prefix, self.start, self.cache, self.logits, self.rebuild = prefix, start, cache, logits, rebuild
        self.fed = start

    def next_logits(self, model, ids: Sequence[int], stats: dict) -> torch.Tensor:
        """The next-token logits after ``[prefix; ids[start:]]``, running only what the cache lacks."""
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
            self.logits = last_logits(model, pending_ids, 1, cache=self.cache)[0, -1]
            self.fed = len(ids)
        return self.logits


class Row:
    """The decoding state of one row: ``ids`` (= ``x``, its first ``prompt_length`` tokens the prompt), the contexts
    of the current stride (keyed by ``(prefix, start)``), the weighted contexts whose next-token distributions it
    mixes, its last context without a passage (``plain``: kept through strides with a passage, so that a later
    stride without one resumes its cache), and its sources."""

    def __init__(self, ids: Sequence[int]):
        self.ids = [int(i) for i in ids]
        if not self.ids:
            raise ValueError("Every prompt needs at least one token.")
        self.prompt_length = len(self.ids)
        self.contexts: dict[tuple[tuple[int, ...], int], Context] = {}
        self.mixture: list[tuple[float, Context]] = []
        self.plain: Context | None = None
        self.top_prefix: tuple[int, ...] | None = None
        self.sources: list[dict] = []
        self.open_sources: list[dict] = []

    def extend_sources(self, end: int) -> None:
        """The passages of the current stride were in context up to generated token ``end`` (excluded)."""
        for source in self.open_sources:
            source["end"] = end


def pending_tokens(row: Row) -> int | None:
    """How many tokens the row's context lacks when its next step can run in a ``RowBatch`` (one context, on a
    plain full-attention, dynamic KV cache holding something), else ``None``. One after a step; more when a stride
    opened a new context (its passage, then the text after it to run)."""
    if len(row.mixture) != 1:
        return None
    context = row.mixture[0][1]
    cache = context.cache
    batchable = (cache is not None and context.start <= context.fed < len(row.ids) and cache.get_seq_length() > 0
                 and all(type(layer) is DynamicLayer and layer.is_initialized for layer in cache.layers))
    return len(row.ids) - context.fed if batchable else None


class RowBatch:
    """Rows whose contexts each lack the same number of tokens, decoded together: their caches are left-padded into
    one, with an attention mask over the padding and each row's own positions. The first step runs what each context
    lacks (a new stride's text after its passage, for every row at once), every later step one token a row. While
    batched, a context's own cache is ``None``; ``dissolve`` gives the contexts still in use their cache back."""

    def __init__(self, model, rows: list[Row]):
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
        """Feed every row what its context lacks (as many tokens for each); the next-token logits of every row."""
        device = self.mask.device
        tokens = torch.tensor([row.ids[context.fed :] for row, context in zip(self.rows, self.contexts)],
                              device=device)
        count = tokens.shape[1]
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.rows), count)], dim=1)
        positions = self.positions[:, None] + torch.arange(count, device=device)
        logits = self.model(input_ids=tokens, attention_mask=self.mask, position_ids=positions,
                            use_cache=True, **cache_kwargs(self.model, self.cache),
                            **one_logit_kwargs(self.model)).logits[:, -1]
        self.positions = self.positions + count
        stats["forward_tokens"] += tokens.numel()
        stats["batched_steps"] += 1
        for row, context, row_logits in zip(self.rows, self.contexts, logits):
            context.fed, context.logits = len(row.ids), row_logits
        return logits

    def select(self, rows: list[Row]) -> None:
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
