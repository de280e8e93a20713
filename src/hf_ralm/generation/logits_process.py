"""``RalmLogitsProcessor``: In-Context RALM for any ``model.generate(logits_processor=[...])``.

Examples:
    ```python
    processor = RalmLogitsProcessor(reader, tokenizer, retriever, config, max_new_tokens=32)
    out = model.generate(ids, max_new_tokens=32,
                         logits_processor=LogitsProcessorList([processor]))
    processor.sources[0][0]["title"]
    ```
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..config.configuration_ralm import RalmConfig
from ..core.passage_cache import DEFAULT_MAX_BYTES, PassageKVCache
from ..core.strides import Strides
from ..retrieval.base import Retriever
from .contexts import Row
from .decoder import RalmDecoder


class RalmLogitsProcessor(LogitsProcessor):
    """In-Context RALM as a ``transformers`` logits processor, for any ``model.generate(logits_processor=[...])``.

    Every ``s`` generated tokens it retrieves (the query is the last ``ℓ`` tokens of the ``input_ids`` it receives)
    and at every step it *returns* the reader's next-token log-probabilities computed on ``[passage; x[a_j:]]``,
    exactly as ``ralm_generate`` computes them (its own KV caches, reused the same way),
    whatever scores it receives: the generating model only supplies the loop.

    Args:
        reader_model: the reader whose next-token log-probabilities it returns.
        tokenizer: the reader's tokenizer (it decodes the queries and encodes the passages).
        retriever: what each stride retrieves with (``None``: nothing).
        config: the RALM settings (``retrieval_stride``, ``query_length``, ``max_length``, ...).
        ensemble_size: how many passages' next-token probabilities are mixed (default: ``config.ensemble_size``).
            1 puts the top passage(s) in context (``config.num_passages`` of them; with ``config.rerank`` the chosen
            one first); ``n > 1`` mixes the top ``n`` passages, one context each, weighted by the softmax of the
            retriever's scores over ``config.ensemble_temperature`` (REPLUG-style; not combined with reranking). The
            per-token probabilities equal those of the evaluation's ensemble (``hf_ralm.core.ensemble``) on the same
            passages.
        max_new_tokens: the tokens ``generate`` is asked for, which shorten the last stride (see the notes).
        pad_token_id: the padding left out of each row's text (default: the tokenizer's; ``None``: none).
        passage_cache: a [`PassageKVCache`][hf_ralm.PassageKVCache] of the reader to reuse passages'
            keys/values across generations; by default it has its own, bounded by ``max_cache_bytes``.
        max_cache_bytes: the bound of the passage cache made for it.
        reranker: what ranks the candidates when ``config.rerank`` does not let the reader rank, as for
            ``ralm_generate``.
        rerank_batch_size: ranking inputs (rows × candidates of a stride) per forward when an LM ranks.

    Notes:
        * It replaces the scores, so processors that run before it are lost. ``generate`` runs the processors it
          builds from the generation config (e.g. ``repetition_penalty``) before the user's: pass such processors
          yourself, after this one. Temperature/top-k/top-p warpers run after it and apply as usual.
        * ``generate`` does not tell processors how many tokens it will generate: give ``max_new_tokens`` to
          shorten the last stride exactly as ``ralm_generate`` does; without it every
          stride counts ``s`` tokens (which only changes which oldest tokens the last stride drops).
        * Leading ``pad_token_id`` tokens (left padding) of the first ``input_ids`` are not part of a row's text.
        * A new generation is detected when ``input_ids`` is not the previous call's plus one token;
          [`reset`][hf_ralm.RalmLogitsProcessor.reset] forces it.
        * The returned log-probabilities cover the reader's vocabulary, cut or padded with ``-inf`` to the width
          of the scores it receives (so the two models must share the tokenizer).
    """

    def __init__(self, reader_model, tokenizer, retriever: Retriever | None, config: RalmConfig,
                 ensemble_size: int | None = None, *, max_new_tokens: int | None = None, pad_token_id: int | None = -1,
                 passage_cache: PassageKVCache | None = None, max_cache_bytes: int = DEFAULT_MAX_BYTES,
                 reranker=None, rerank_batch_size: int = DEFAULT_BATCH_SIZE):
        self.decoder = RalmDecoder(reader_model, tokenizer, retriever, config, passage_cache,
                                   ensemble_size=ensemble_size, max_cache_bytes=max_cache_bytes, reranker=reranker,
                                   rerank_batch_size=rerank_batch_size)
        self.max_new_tokens = max_new_tokens
        self.pad_token_id = tokenizer.pad_token_id if pad_token_id == -1 else pad_token_id
        self.rows: list[Row] = []
        self._seen: torch.Tensor | None = None
        self._prompt_length = 0

    @property
    def sources(self) -> list[list[dict]]:
        """Per row of the current (or last) generation, the passages in context and the generated tokens they
        predicted, as in ``sources``."""
        return [row.sources for row in self.rows]

    @property
    def stats(self) -> dict:
        """The decoding counters, as [`RalmGenerateOutput.ralm_stats`][hf_ralm.RalmGenerateOutput] holds them."""
        return self.decoder.report()

    def reset(self) -> None:
        """Forget the current generation (the next call starts a new one)."""
        self.rows, self._seen = [], None
        self.decoder.reset()

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
            rows.append(Row(ids[skip:]))
        self.rows, self._prompt_length = rows, input_ids.shape[1]

    @torch.no_grad()
    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """One step of ``generate``: retrieve when a stride starts, then every row's next-token log-probabilities.

        Args:
            input_ids: the rows so far (prompts and the tokens generated), as ``generate`` passes them.
            scores: the generating model's scores, whose width and device the result takes.

        Returns:
            The reader's next-token log-probabilities on each row's context, ``-inf`` beyond its vocabulary.
        """
        if self._continues(input_ids):
            for row, token in zip(self.rows, input_ids[:, -1].tolist()):
                row.ids.append(token)
        else:
            self._begin(input_ids)
        self._seen = input_ids
        generated = input_ids.shape[1] - self._prompt_length
        strides = Strides(self.decoder.config.retrieval_stride, self.max_new_tokens)
        if strides.starts(generated):
            self.decoder.start_stride(self.rows, strides.length(generated), generated)
        out = torch.full_like(scores, float("-inf"))
        width = scores.shape[-1]
        for b, (row, row_scores) in enumerate(zip(self.rows, self.decoder.step(self.rows))):
            log_probs = torch.log_softmax(row_scores, dim=-1)
            keep = min(width, log_probs.shape[-1])
            out[b, :keep] = log_probs[:keep].to(out.device, out.dtype)
            row.extend_sources(generated + 1)
        return out
