"""``ralm_generate``: ``transformers``' ``generate`` with In-Context RALM's decoding loop (see
``hf_ralm.generation`` for the exact semantics), and its output, [`RalmGenerateOutput`][hf_ralm.RalmGenerateOutput].

Examples:
    ```python
    out = ralm_generate(model, tokenizer, retriever, config, "The Eiffel tower", max_new_tokens=16,
                        return_dict_in_generate=True)
    tokenizer.decode(out.sequences[0]), out.sources[0][0]["title"]
    ```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList
from transformers.generation import GenerateDecoderOnlyOutput
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.stopping_criteria import StopStringCriteria
from transformers.utils import logging

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..config.configuration_ralm import RalmConfig
from ..core.engine_generation import EngineSampling
from ..core.engines.reader import Reader, engine_reader
from ..core.modeling_utils import left_pad, model_device, prompt_rows, vocabulary_size
from ..core.passage_cache import DEFAULT_MAX_BYTES, PassageKVCache
from ..core.strides import Strides
from ..errors import SettingError, setting
from ..retrieval.base import Retriever
from ..utils.checks import check_texts, check_vocabulary, refuse_type
from ..utils.progress import tqdm
from .contexts import Row
from .decoder import RalmDecoder
from .engine import generate_on_engine_reader

logger = logging.get_logger(__name__)


@dataclass
class RalmGenerateOutput(GenerateDecoderOnlyOutput):
    """``transformers``' decoder-only generate output plus, per row, the passages that were in context.

    ``sources[b]`` lists, for every stride of row ``b`` that had a passage in context, a dict ``{"start", "end",
    "id", "title", "text", "score"}``: the passage was in context for generated tokens ``[start, end)`` (indices into
    the row's generated tokens, i.e. ``sequences[b, prompt_length + start : prompt_length + end]``); when reranked,
    also ``"rank"``: the passage's index among the stride's candidates (0: retrieval's top); in an ensemble,
    ``"weight"``: its mixture weight. ``ralm_stats`` counts row-strides (``strides``, ``strides_with_passage``,
    ``empty_retrievals``; ``reranked_strides``: those whose candidates were reranked, ``no_passage_chosen``: those
    where no passage won, ``gated_strides``: those a retrieval gate closed; ``retrieved_fraction``:
    ``strides_with_passage / strides``), ``passage_changes`` (strides after a row's first whose top passage differs
    from the previous stride's), contexts kept or rebuilt, plain contexts resumed and the prefill tokens that saved
    (``plain_tokens_reused``), the tokens run through the model (passages and ranking inputs excluded), batched
    steps, the passage cache's counters (``reused_tokens``: prefill it saved), and where the time went:
    ``retrieval_s`` (the retriever's searches) and ``reader_s`` (the rest of the decoding loop).
    """

    sources: list[list[dict]] | None = None
    ralm_stats: dict | None = None


_SUPPORTED_MODES = (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE)


def _decode(model, input_ids, logits_processor: LogitsProcessorList, stopping_criteria: StoppingCriteriaList,
            generation_config: GenerationConfig, decoder: RalmDecoder, streamer, show_progress: bool,
            sources_out: list | None, model_kwargs: dict):
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
    rows = [Row(ids) for ids in prompt_rows(input_ids, model_kwargs.get("attention_mask"))]
    total = generation_config.max_length - prompt_length
    strides = Strides(decoder.config.retrieval_stride, total)
    pad_token_id = generation_config._pad_token_tensor
    has_eos_stopping_criteria = any(hasattr(c, "eos_token_id") for c in stopping_criteria)
    return_dict = generation_config.return_dict_in_generate
    scores = () if return_dict and generation_config.output_scores else None
    raw_logits = () if return_dict and generation_config.output_logits else None
    unfinished = torch.ones(batch_size, dtype=torch.long, device=input_ids.device)
    if pad_token_id is not None:
        pad_token_id = pad_token_id.to(input_ids.device)

    with decoder.decoding():
        generated = 0
        bar = None  # made once the first token is out: a setting refused at the first stride leaves no bar behind
        while generated < total:
            # rows whose next token will be replaced by padding need no forward
            alive = unfinished.tolist() if has_eos_stopping_criteria else [1] * batch_size  # one sync per step
            running = [b for b in range(batch_size) if alive[b]]
            if strides.starts(generated):
                decoder.start_stride([rows[b] for b in running], strides.length(generated), generated)
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
            if bar is None:
                bar = tqdm(total=total, desc="Generating", unit="tok", disable=not show_progress, leave=False)
            bar.update(1)
            if strides.starts(generated):
                bar.set_postfix_str(str(decoder.stage_times()), refresh=False)

            unfinished = unfinished & ~stopping_criteria(input_ids, scores)
            if streamer is not None:
                streamer.put(next_tokens.cpu())
            if unfinished.max() == 0:
                break

        if bar is not None:
            bar.close()
    if streamer is not None:
        streamer.end()
    if sources_out is not None:
        sources_out.extend(row.sources for row in rows)
    if not return_dict:
        return input_ids
    return RalmGenerateOutput(sequences=input_ids, scores=scores, logits=raw_logits,
                              sources=[row.sources for row in rows], ralm_stats=decoder.report())


def _generate_on_engine(reader: Reader, tokenizer, retriever: Retriever | None, config: RalmConfig, inputs,
                        generation_config: GenerationConfig | None, in_process: dict[str, Any], kwargs: dict, *,
                        reranker, rerank_batch_size: int, show_progress: bool, sources_out: list | None):
    """``ralm_generate`` on an engine reader (``engine``): what acts in this process between tokens
    (``in_process``: logits processors, stopping criteria, a streamer, a passage store) refused in one line."""
    given = sorted(name for name, value in in_process.items() if value)
    if given:
        raise SettingError(f"{', '.join(given)}: not taken by generation on {setting('engine')} {reader.engine}, "
                           "which draws a stride's tokens in the engine (stop with eos_token_id or stop_strings); drop "
                           f"{'it' if len(given) == 1 else 'them'}, or use {setting('engine')} transformers.")
    input_ids = kwargs.pop("input_ids", None) if inputs is None else inputs
    if input_ids is None:  # no BOS to start from on the engine: it takes the prompts' ids
        refuse_type("inputs", input_ids, _INPUTS)
    attention_mask = kwargs.pop("attention_mask", None)
    sampling, _ = EngineSampling.of(reader, generation_config, kwargs, input_ids.shape[1])
    generated = generate_on_engine_reader(reader, tokenizer, retriever, config, input_ids,
                                          attention_mask=attention_mask, sampling=sampling,
                                          reranker=reranker, rerank_batch_size=rerank_batch_size,
                                          show_progress=show_progress)
    if sources_out is not None:
        sources_out.extend(generated.sources)
    if not sampling.return_dict_in_generate:
        return generated.sequences
    return RalmGenerateOutput(sequences=generated.sequences, sources=generated.sources,
                              ralm_stats=generated.ralm_stats)


def _encode_prompts(tokenizer, prompts: str | Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of text prompts (the tokenizer's default special tokens), left-padded, and their attention mask."""
    if tokenizer is None:
        raise ValueError("Text prompts need a tokenizer.")
    batch = left_pad(tokenizer, [prompts] if isinstance(prompts, str) else list(prompts))
    return batch.input_ids, batch.attention_mask


def _is_text(inputs: Any) -> bool:
    return isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and bool(inputs)
                                       and all(isinstance(x, str) for x in inputs))


_INPUTS = "text prompts (a str or a list of str) or token ids (a 2-D tensor, a row per prompt)"


def _check_inputs(name: str, inputs: Any, vocab_size: int | None) -> None:
    """Refuse in one line naming ``name`` (``inputs`` or ``input_ids``) what generation cannot take: no text prompts
    and no 2-D tensor (an empty list, a list holding something else than text, a 1-D tensor), and ids outside the
    reader's vocabulary of ``vocab_size``, before an embedding lookup fails naming neither."""
    if isinstance(inputs, (list, tuple)) and (not inputs or any(isinstance(item, str) for item in inputs)):
        check_texts(name, inputs)  # names the empty list, or the first item that is no text
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2:
        fix = ("one prompt's ids go as ids[None]" if isinstance(inputs, torch.Tensor) else
               "token ids go as a tensor, torch.tensor(rows)" if isinstance(inputs, (list, tuple)) else "")
        refuse_type(name, inputs, _INPUTS, fix)
    check_vocabulary(name, inputs.tolist(), vocab_size)


@torch.no_grad()
def ralm_generate(
    model,
    tokenizer,
    retriever: Retriever | None,
    config: RalmConfig,
    inputs: torch.Tensor | str | Sequence[str] | None = None,
    *,
    generation_config: GenerationConfig | None = None,
    logits_processor: LogitsProcessorList | None = None,
    stopping_criteria: StoppingCriteriaList | None = None,
    streamer=None,
    passage_cache: PassageKVCache | None = None,
    max_cache_bytes: int = DEFAULT_MAX_BYTES,
    reranker=None,
    rerank_batch_size: int = DEFAULT_BATCH_SIZE,
    keep_plain_context: bool = True,
    show_progress: bool = False,
    sources_out: list | None = None,
    **kwargs,
):
    """``model.generate(...)`` with In-Context RALM (see the module's docstring for the exact semantics).

    Takes what ``transformers``' ``generate`` takes (``input_ids``/``attention_mask``, ``generation_config`` or its
    fields as keyword arguments, ``logits_processor``, ``stopping_criteria``, ``streamer``,
    ``return_dict_in_generate``, ``output_scores``/``output_logits``); ``inputs`` may also be a text or a list of
    texts (tokenized with ``tokenizer``, left-padded). Anything else (an empty list, a list of something else than
    texts, ids outside the reader's vocabulary) is refused in one line naming ``inputs`` or ``input_ids`` before
    anything runs.

    Args:
        model: the reader (a transformers causal LM, or an engine reader).
        tokenizer: its tokenizer (it decodes the queries, encodes the passages and text prompts).
        retriever: what each stride retrieves with (``None``: nothing).
        config: the RALM settings (``retrieval_stride``, ``query_length``, ``max_length``, ...).
        inputs: text prompts, or the prompts' token ids (a 2-D tensor, a row per prompt).
        generation_config, logits_processor, stopping_criteria, streamer: as ``generate`` takes them.
        max_cache_bytes: the bound of the passage cache made for this call.
        passage_cache: a [`PassageKVCache`][hf_ralm.core.passage_cache.PassageKVCache] of ``model`` to reuse passages'
            keys/values across calls; by default each call has its own, bounded by ``max_cache_bytes``.
        reranker: what ranks the candidates when ``config.rerank`` does not let the reader rank: the
            ``LMReranker`` of ``"lm"`` with a ``reranker_model``, or the
            [`PredictiveReranker`][hf_ralm.selection.predictive.PredictiveReranker] of ``"predictive"``
            (``load_reranker`` loads the one ``config`` names).
        rerank_batch_size: ranking inputs (rows × candidates of a stride) per forward when an LM ranks.
        keep_plain_context: a stride without a passage (a closed retrieval gate, an empty retrieval) resumes the
            row's last context without one, whose cache then takes only the tokens generated since; ``False``
            rebuilds it (what benchmarks/speed/bench_generate.py compares).
        use_cache: ``False`` runs the whole ``[passage; x[a_j:]]`` at every step (the slow reference).
        show_progress: a progress bar over the new tokens (what ``hf-ralm generate`` shows).
        sources_out: a list that receives every row's ``sources`` (in row order) whatever
            ``return_dict_in_generate`` says: how
            [`RetrievalAugmentedModel.collect_sources`][hf_ralm.RetrievalAugmentedModel.collect_sources] records them
            under a ``pipeline``, which asks for ids.
        **kwargs: ``generate``'s other arguments (``input_ids``, ``attention_mask``, ``return_dict_in_generate``, a
            generation config's fields, ...).

    Returns:
        The token ids, or with ``return_dict_in_generate=True`` a
            [`RalmGenerateOutput`][hf_ralm.RalmGenerateOutput] with per-row ``sources``.

    Raises:
        ValueError: ``custom_generate`` is given, text prompts come without a tokenizer, or the generation mode is
            not greedy decoding or sampling.
        InputTypeError: ``inputs`` or ``input_ids`` is neither text prompts nor a 2-D tensor of ids.
        SettingError: an id is outside the reader's vocabulary, or (on an engine reader) something that acts
            between tokens in this process is given.
    """
    if "custom_generate" in kwargs:
        raise ValueError("RALM generation runs its own decoding loop: custom_generate cannot be combined with it.")
    if _is_text(inputs):
        inputs, mask = _encode_prompts(tokenizer, inputs)
        kwargs.setdefault("attention_mask", mask)
    elif _is_text(kwargs.get("input_ids")):
        kwargs["input_ids"], mask = _encode_prompts(tokenizer, kwargs["input_ids"])
        kwargs.setdefault("attention_mask", mask)
    for name, given in (("inputs", inputs), ("input_ids", kwargs.get("input_ids"))):
        if given is not None:  # none at all: transformers starts from the BOS token
            _check_inputs(name, given, vocabulary_size(model))
    reader = engine_reader(model)
    if reader is not None:
        in_process = {"logits_processor": logits_processor, "stopping_criteria": stopping_criteria,
                      "streamer": streamer, "passage_cache": passage_cache}
        return _generate_on_engine(reader, tokenizer, retriever, config, inputs, generation_config, in_process, kwargs,
                                   reranker=reranker, rerank_batch_size=rerank_batch_size,
                                   show_progress=show_progress, sources_out=sources_out)
    # prompts on the model's device: the loop's next-token logits then never travel to the host and back
    device = model_device(model)
    if isinstance(inputs, torch.Tensor):
        inputs = inputs.to(device)
    for name in ("input_ids", "attention_mask"):
        if isinstance(kwargs.get(name), torch.Tensor):
            kwargs[name] = kwargs[name].to(device)

    # stop strings need the tokenizer, which generate does not hand to a custom decoding loop: build them here
    stop_strings = kwargs.pop("stop_strings", None)
    if stop_strings is None and generation_config is not None and generation_config.stop_strings is not None:
        stop_strings = generation_config.stop_strings
        generation_config = GenerationConfig.from_dict({**generation_config.to_dict(), "stop_strings": None})
    if stop_strings is not None:
        stopping_criteria = StoppingCriteriaList(list(stopping_criteria or []))
        stopping_criteria.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=stop_strings))

    decoder = RalmDecoder(model, tokenizer, retriever, config, passage_cache, max_cache_bytes=max_cache_bytes,
                          reranker=reranker, rerank_batch_size=rerank_batch_size,
                          keep_plain_context=keep_plain_context)

    def decode(model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
        return _decode(model, input_ids, logits_processor, stopping_criteria, generation_config, decoder, streamer,
                       show_progress, sources_out, model_kwargs)

    return model.generate(inputs, generation_config=generation_config, logits_processor=logits_processor,
                          stopping_criteria=stopping_criteria, streamer=streamer, custom_generate=decode, **kwargs)
