"""In-Context RALM's generation on an engine reader (a [`Reader`][hf_ralm.core.engines.reader.Reader]): the same
strides as in this process (see ``hf_ralm.generation``), each run as one engine call for every row.

At the start of stride ``j`` the ``RalmDecoder`` retrieves and chooses each row's passage(s) exactly
as it does for a transformers reader (gates, reranking by the reader through the engine's scores, several passages in
one context), and each row's context ``[d_j; x[a_j:]]`` becomes a token prompt from which the engine draws the
stride's ``s_j`` tokens ([`continue_prompts`][hf_ralm.core.engines.reader.Reader.continue_prompts]; an engine's prefix
caching reuses what an earlier stride's prompt shares with it). A row stops after its first end-of-sequence token or the
token that completes a stop string ([`cut_at_stop`][hf_ralm.core.engine_generation.cut_at_stop]), and retrieves no more.
Greedy decoding picks the tokens transformers' would (the same contexts; the engine's arithmetic differs in the last
bits), and sampling draws each row's stride with a seed of its own
([`StrideSeeds`][hf_ralm.core.engine_generation.StrideSeeds]). An ensemble of passages, which mixes next-token
distributions that stay in the engine, is refused in one line.

Examples:
    ```python
    generated = generate_on_engine_reader(reader, tokenizer, retriever, config, input_ids,
                                          attention_mask=attention_mask, sampling=sampling)
    generated.sequences, generated.sources[0]
    ```
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..config.configuration_ralm import RalmConfig
from ..core.engine_generation import Continuation, EngineSampling, StrideSeeds, append_tokens, cut_at_stop
from ..core.modeling_utils import prompt_rows
from ..core.strides import Strides
from ..errors import SettingError, setting
from ..retrieval.base import Retriever
from ..utils.progress import tqdm
from .contexts import Row
from .decoder import RalmDecoder


@dataclass
class EngineGeneration:
    """What generation on an engine reader gives: the ``sequences`` (prompts, then new tokens, a row that stopped
    early padded), each row's ``sources`` and the decoder's counters (``ralm_stats``), as
    [`RalmGenerateOutput`][hf_ralm.RalmGenerateOutput] holds them."""

    sequences: torch.Tensor
    sources: list[list[dict]]
    ralm_stats: dict


def generate_on_engine_reader(model, tokenizer, retriever: Retriever | None, config: RalmConfig,
                              input_ids: torch.Tensor, *, attention_mask: torch.Tensor | None,
                              sampling: EngineSampling, reranker=None, rerank_batch_size: int = DEFAULT_BATCH_SIZE,
                              show_progress: bool = False) -> EngineGeneration:
    """Generate after each row of ``input_ids`` with In-Context RALM, one engine call per stride (see the module
    docstring).

    Args:
        model: the engine reader.
        tokenizer: its tokenizer (it decodes the queries and encodes the passages).
        retriever: what each stride retrieves with (``None``: nothing).
        config: the RALM settings.
        input_ids: the prompts' ids, a row each.
        attention_mask: 0 on each row's padding, which is left out (``None``: no padding).
        sampling: how the engine draws the tokens, ``sampling.max_new_tokens`` of them.
        reranker: what ranks the candidates when the reader does not, as ``ralm_generate`` takes it.
        rerank_batch_size: ranking inputs per engine call when an LM ranks.
        show_progress: a progress bar over the new tokens.

    Returns:
        The [`EngineGeneration`][hf_ralm.generation.engine.EngineGeneration]: sequences, sources and counters.

    Raises:
        SettingError: an ensemble of passages (``ensemble_size`` above 1), whose mixture the engine cannot draw
            from.
    """
    decoder = RalmDecoder(model, tokenizer, retriever, config, reranker=reranker, rerank_batch_size=rerank_batch_size)
    if decoder.ensemble_size > 1:
        raise SettingError(f"An ensemble of passages ({setting('ensemble_size')} {decoder.ensemble_size}) mixes "
                           "next-token distributions, which stay in the engine: generate with ensemble_size 1 on "
                           f"{setting('engine')} {model.engine}, or with {setting('engine')} transformers.")
    rows = [Row(ids) for ids in prompt_rows(input_ids, attention_mask)]
    new: list[list[int]] = [[] for _ in rows]
    seeds = StrideSeeds([row.ids for row in rows]) if sampling.do_sample else None
    strides, total = Strides(config.retrieval_stride, sampling.max_new_tokens), sampling.max_new_tokens
    running = list(range(len(rows)))
    generated = 0
    with decoder.decoding(), tqdm(total=total, desc="Generating", unit="tok", disable=not show_progress,
                                  leave=False) as bar:
        while running and generated < total:
            stride_tokens = strides.length(generated)
            decoder.start_stride([rows[b] for b in running], stride_tokens, generated)
            calls = []
            for b in running:
                context = rows[b].mixture[0][1]
                calls.append(Continuation((*context.prefix, *rows[b].ids[context.start :]), stride_tokens,
                                          seeds.seed(b, strides.index(generated)) if seeds else None))
            outputs = model.continue_prompts(calls, sampling)
            still = []
            for b, tokens in zip(running, outputs):
                kept, stopped = cut_at_stop(tokenizer, new[b], tokens, sampling)
                rows[b].ids.extend(kept)
                new[b].extend(kept)
                rows[b].extend_sources(generated + len(kept))
                if not stopped and len(kept) == stride_tokens:
                    still.append(b)
            generated += stride_tokens
            bar.update(stride_tokens)
            bar.set_postfix_str(str(decoder.stage_times()), refresh=False)
            running = still
    return EngineGeneration(append_tokens(input_ids, new, sampling.pad_token_id), [row.sources for row in rows],
                            decoder.report())
