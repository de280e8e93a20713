"""How generation ranks (the paper's §6): at the start of a stride, which of a row's retrieved candidates goes in
context is the selection policy's choice (``PassagePolicy``, with the registry's
strategies, as in evaluation; ``hf_ralm.generation`` states the rules); what is generation's own is how an LM
ranks a stride's options (``StrideRanker``): the ranking inputs are scored by the evaluation's scorer
(``score_inputs``) and, for another LM, built as the evaluation builds them
(``inputs``), and what a random choice is keyed on (``random_key``).

Examples:
    >>> ranking_start(num_tokens=40, rerank_tokens=16, starts=[10, 14])   # the last 16 tokens of x
    24
    >>> ranking_start(num_tokens=20, rerank_tokens=16, starts=[4, 9])     # never x's first token in a context
    10
    >>> ranker = StrideRanker(model, tokenizer, rows, 4, max_length=512, passage_cache=cache)   # doctest: +SKIP
    >>> ranker.rank(range(len(rows)), options, config, None)   # per row, its options' ranking NLLs  # doctest: +SKIP
"""

from __future__ import annotations

import zlib
from typing import Sequence

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..config.configuration_ralm import RalmConfig
from ..core.passage_cache import PassageKVCache
from ..core.passages import Passage
from ..core.scoring import ScoredInput, score_inputs
from ..selection.rankers import LMReranker
from ..core.strides import stride_start
from .contexts import Row, encode_passage


def ranking_start(num_tokens: int, rerank_tokens: int, starts: Sequence[int]) -> int:
    """Where the ranking tokens of a stride begin in ``x`` (they end with it): the last ``rerank_tokens`` tokens,
    fewer when ``x`` or a candidate's context is shorter, so that none is the first token of ``x`` in any candidate's
    context ``[d_i; x[a_i:]]`` (``starts`` are the ``a_i``). Every candidate is ranked on the same tokens."""
    return max(num_tokens - rerank_tokens, max(starts) + 1)


def random_key(prompt_ids: Sequence[int], stride_index: int) -> int:
    """The key of ``random_choice`` for stride ``j = stride_index`` of a row:
    ``crc32(prompt) · 2**32 + j``, the CRC-32 of the prompt's token ids written in decimal and joined by spaces. A
    row's choices depend on its prompt and the stride only, whatever the batch, its padding or its order.

    Examples:
        >>> random_key([5, 6, 7], 2) == (zlib.crc32(b"5 6 7") << 32) + 2
        True
    """
    return (zlib.crc32(" ".join(str(i) for i in prompt_ids).encode()) << 32) + stride_index


class StrideRanker:
    """Ranks options for the rows of a stride (generation's ``Ranker``): each row's
    option ``d_i`` as the stride's context ``[d_i; x[a_i:]]``, ranked on the last ``rerank_tokens`` tokens of ``x``
    (``ranking_start``) by the reader, or by another LM in text. The inputs of all rows run in one
    ``score_inputs`` call (with ``reuse_prefix_kv``, passages' keys/values shared through
    ``passage_cache``, and another LM's through ``lm_caches``, kept across strides).

    Examples:
        ```python
        ranker = StrideRanker(model, tokenizer, rows, stride_tokens=4, max_length=512, passage_cache=cache)
        ranker.rank(range(len(rows)), [[rome, None]] * len(rows), config, None)   # per row: [NLL with, without]
        ```
    """

    def __init__(self, model, tokenizer, rows: Sequence[Row], stride_tokens: int, max_length: int,
                 *, passage_cache: PassageKVCache, lm_caches: dict | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 reuse_prefix_kv: bool = True):
        self.model, self.tokenizer, self.rows, self.stride_tokens = model, tokenizer, rows, stride_tokens
        self.max_length, self.passage_cache, self.batch_size = max_length, passage_cache, batch_size
        self.lm_caches = {} if lm_caches is None else lm_caches
        self.reuse_prefix_kv = reuse_prefix_kv

    def rank(self, items: Sequence[int], options: Sequence[Sequence[Passage | None]], config: RalmConfig,
             lm: LMReranker | None) -> list[list[float] | None]:
        inputs, counts = [], []
        for i, row_options in zip(items, options):
            row = self.rows[i]
            if list(row_options) == [None]:  # nothing retrieved: nothing to rank
                counts.append(0)
                continue
            prefixes = [tuple(encode_passage(self.tokenizer, option, config)) for option in row_options]
            starts = [stride_start(len(row.ids), self.stride_tokens, len(prefix), self.max_length)
                      for prefix in prefixes]
            first = ranking_start(len(row.ids), config.rerank_tokens, starts)
            row_inputs = [] if first >= len(row.ids) else self._inputs(row, row_options, prefixes, starts, first,
                                                                       config, lm)
            inputs.extend(row_inputs)
            counts.append(len(row_inputs))
        if lm is None:
            model, cache = self.model, self.passage_cache
        else:
            model, cache = lm.model, self.lm_caches.setdefault(id(lm), PassageKVCache(lm.model))
        nlls = iter(score_inputs(model, inputs, self.batch_size, self.reuse_prefix_kv,
                                 cache if self.reuse_prefix_kv else None))
        return [[float(next(nlls).sum()) for _ in range(count)] if count else None for count in counts]

    def _inputs(self, row: Row, options: Sequence[Passage | None], prefixes: list[tuple[int, ...]],
                starts: list[int], first: int, config: RalmConfig, lm: LMReranker | None) -> list[ScoredInput]:
        """The ranking inputs of a row's options: the reader's ``[d_i; x[a_i:]]`` scoring ``x[first:]``, or another
        LM's, in text."""
        if lm is not None:
            decode = self.tokenizer.decode
            return lm.inputs(decode(row.ids[:first]), decode(row.ids[first:]), options, config)
        inputs = []
        for prefix, start in zip(prefixes, starts):
            tokens = list(prefix) + row.ids[start:]
            inputs.append(ScoredInput(tokens, 0, len(tokens), prefix, len(prefix) + first - start))
        return inputs
