"""Keys/values of retrieved passages, computed once and reused, in a least-recently-used store bounded by bytes.

In-Context RALM always puts the passage at position 0, and attention is causal, so a passage's keys/values do not depend
on the text after it: they can be computed once per passage and reused by every window, stride and row that puts the
same passage in context. Only the text after the passage then has to be run. The scorer
([`hf_ralm.core.scoring.score_windows`][hf_ralm.score_windows]) and generation
([`hf_ralm.generation`][hf_ralm.generation]) both take their passages' keys/values from here, and can share one store.

Examples:
    ```python
    cache = PassageKVCache(model, max_bytes=256 * 2**20)
    past, logits = cache.get(passage_ids)   # a private copy: extend it freely
    cache.stats()
    # {'hits': 0, 'misses': 1, 'computed_tokens': 57, 'reused_tokens': 0, 'entries': 1, 'bytes': 466944, ...}
    ```
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Sequence

import torch
from transformers import DynamicCache

from .engines.reader import engine_reader
from .modeling_utils import (
    cache_nbytes,
    cache_rows,
    empty_cache,
    last_logits,
    model_device,
    stack_cache_rows,
    stackable_rows,
)

DEFAULT_MAX_BYTES = 512 * 2**20


class PassageKVCache:
    """A least-recently-used store of passages' keys/values for one model, bounded by ``max_bytes``.

    The key is the passage's token ids (what is actually in context), so two passages that encode the same share an
    entry. [`get`][hf_ralm.PassageKVCache.get] hands out a private deep copy of the stored cache, which the caller may
    extend; the stored one is never modified. A passage larger than ``max_bytes`` on its own is computed but not stored.

    Args:
        model: the transformers causal LM whose keys/values are stored.
        max_bytes: the most the entries may take, keys/values and logits together.

    Attributes:
        bytes: what the entries take now.
        hits: passage look-ups served from the store.
        misses: passage look-ups computed.
        computed_tokens: passage tokens run through the model.
        reused_tokens: passage tokens served from the store (the prefill saved).

    Raises:
        ValueError: ``max_bytes`` is negative.
    """

    def __init__(self, model, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be non-negative, got {max_bytes}.")
        self.model = model
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[tuple[int, ...], tuple[DynamicCache, torch.Tensor, int]] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.computed_tokens = 0
        self.reused_tokens = 0
        self._stacks_rows: bool | None = None

    @classmethod
    def for_model(cls, model, passage_cache: PassageKVCache | None = None,
                  max_bytes: int = DEFAULT_MAX_BYTES) -> PassageKVCache | None:
        """The store a call on ``model`` uses: the one given, checked, or a new one.

        Args:
            model: the reader.
            passage_cache: a store the caller shares (``None``: a new one).
            max_bytes: the new store's bound.

        Returns:
            ``passage_cache``, or a new store for ``model``; ``None`` for an engine reader (a
                [`Reader`][hf_ralm.Reader], such as [`VllmReader`][hf_ralm.VllmReader]), whose keys/values stay in
                its engine.

        Raises:
            ValueError: ``passage_cache`` was built for another model, or is given for an engine reader.

        Examples:
            ```python
            store = PassageKVCache.for_model(model, None, max_bytes=64 * 2**20)
            ```
        """
        if engine_reader(model) is not None:
            if passage_cache is not None:
                raise ValueError("passage_cache holds keys/values computed in this process: a reader run by an "
                                 "engine keeps its own.")
            return None
        if passage_cache is None:
            return cls(model, max_bytes)
        if passage_cache.model is not model:
            raise ValueError("passage_cache was built for another model: its keys/values would be wrong here.")
        return passage_cache

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, passage_ids: Sequence[int]) -> bool:
        return tuple(passage_ids) in self._entries

    def get(self, passage_ids: Sequence[int]) -> tuple[DynamicCache, torch.Tensor]:
        """The keys/values of one passage, from the store or computed (and stored).

        Args:
            passage_ids: the passage's token ids, as they are in context.

        Returns:
            A cache holding the passage's keys/values (a copy the caller owns) and the logits after its last token.

        Raises:
            ValueError: the passage is empty.
        """
        key = tuple(int(i) for i in passage_ids)
        if not key:
            raise ValueError("An empty passage has no keys/values: start from empty_cache(model) instead.")
        (cache, logits), = self.prefill([key])
        return (copy.deepcopy(cache) if key in self._entries else cache), logits  # the store's own: copied

    def stacked(self, passages: Sequence[Sequence[int]], repeats: Sequence[int]) -> DynamicCache:
        """One cache of several passages' keys/values, row by row, for inputs with different passages to run in one
        batch.

        Only for a model whose cache [`stacks_rows`][hf_ralm.PassageKVCache.stacks_rows]; the passages the store lacks
        are computed as [`prefill`][hf_ralm.PassageKVCache.prefill] does, and what the store holds is left as it is.

        Args:
            passages: the passages' token ids, all of one length.
            repeats: how many rows each passage takes, in order.

        Returns:
            A cache of ``sum(repeats)`` rows.

        Raises:
            ValueError: the passages are empty or of different lengths.

        Examples:
            ```python
            past = store.stacked([rome_ids, paris_ids], [3, 2])   # 5 rows: rome's keys/values 3 times, then paris's
            ```
        """
        if len({len(passage) for passage in passages}) != 1 or not passages[0]:
            raise ValueError("stacked() takes non-empty passages of one length (their rows must align).")
        return stack_cache_rows([cache for cache, _ in self.prefill(passages)], repeats)

    def prefill(self, passages: Sequence[Sequence[int]]) -> list[tuple[DynamicCache, torch.Tensor]]:
        """Each passage's cache and the logits after it, as [`get`][hf_ralm.PassageKVCache.get] gives them one by one
        (and counted so), but the passages the store lacks computed together.

        Those of each length run in one forward, a row each, when the model's cache
        [`stacks_rows`][hf_ralm.PassageKVCache.stacks_rows] (one forward a passage leaves a GPU mostly idle, launching
        small kernels).

        Args:
            passages: the passages' token ids.

        Returns:
            Per passage, its cache and the logits after its last token. The caches are the store's own: copy one
                before extending it.

        Raises:
            ValueError: a passage is empty.

        Examples:
            ```python
            [(rome_cache, rome_logits), (paris_cache, _)] = store.prefill([rome_ids, paris_ids])   # one forward
            ```
        """
        keys = [tuple(int(i) for i in passage) for passage in passages]
        if not all(keys):
            raise ValueError("An empty passage has no keys/values: start from empty_cache(model) instead.")
        found: dict[tuple[int, ...], tuple[DynamicCache, torch.Tensor]] = {}
        missing: dict[int, list[tuple[int, ...]]] = {}
        for key in keys:
            if key in found or key in missing.get(len(key), ()):  # a later look-up of it would find it stored
                self.hits += 1
                self.reused_tokens += len(key)
            elif (entry := self._lookup(key)) is not None:
                found[key] = entry[:2]
            else:
                missing.setdefault(len(key), []).append(key)
        for group in missing.values():
            batches = [group] if self.stacks_rows() else [[key] for key in group]
            for batch in batches:
                cache, logits = self._compute(batch)
                for key, row, row_logits in zip(batch, cache_rows(cache) if len(batch) > 1 else [cache], logits):
                    self._store(key, row, row_logits)
                    found[key] = (row, row_logits)  # kept here even when the store cannot hold it
        return [found[key] for key in keys]

    def stacks_rows(self) -> bool:
        """Whether this model's caches can be stacked row by row ([`stacked`][hf_ralm.PassageKVCache.stacked]): every
        layer a dynamic one."""
        if self._stacks_rows is None:
            self._stacks_rows = stackable_rows(empty_cache(self.model))
        return self._stacks_rows

    def _lookup(self, key: tuple[int, ...]) -> tuple[DynamicCache, torch.Tensor, int] | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            self.reused_tokens += len(key)
        return entry

    def _compute(self, keys: list[tuple[int, ...]]) -> tuple[DynamicCache, torch.Tensor]:
        """The keys/values of passages of one length, in one forward (a row each), and the logits after each."""
        self.misses += len(keys)
        self.computed_tokens += sum(len(key) for key in keys)
        cache = empty_cache(self.model)
        ids = torch.tensor(keys, device=model_device(self.model))
        with torch.no_grad():
            logits = last_logits(self.model, ids, 1, cache=cache)[:, -1]
        return cache, logits

    def _store(self, key: tuple[int, ...], cache: DynamicCache, logits: torch.Tensor) -> None:
        """Keep one passage's cache, least recently used entries evicted to make room; one larger than the whole
        store is not kept."""
        size = cache_nbytes(cache) + logits.numel() * logits.element_size()
        if size > self.max_bytes:
            return
        while self._entries and self.bytes + size > self.max_bytes:
            _, (_, _, freed) = self._entries.popitem(last=False)
            self.bytes -= freed
        self._entries[key] = (cache, logits, size)
        self.bytes += size

    def clear(self) -> None:
        """Drop every entry (the counters are kept)."""
        self._entries.clear()
        self.bytes = 0

    def stats(self) -> dict:
        """The store's counters since creation, and what it holds.

        Returns:
            ``hits`` and ``misses`` (passage look-ups served from the store or computed), ``computed_tokens`` and
                ``reused_tokens`` (the prefill the store saved), and the store's ``entries``, ``bytes`` and
                ``max_bytes``.
        """
        return {
            "hits": self.hits,
            "misses": self.misses,
            "computed_tokens": self.computed_tokens,
            "reused_tokens": self.reused_tokens,
            "entries": len(self._entries),
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
        }
