"""Small helpers around a causal LM and its KV cache, shared by the scorer, the passage cache and generation.

Examples:
    ```python
    ids = torch.tensor([[5, 6, 7]], device=model_device(model))
    cache = empty_cache(model)
    last_logits(model, ids, 1, cache=cache).shape   # torch.Size([1, 1, 49152])
    cache_nbytes(cache)   # 276480
    ```
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer
from ..errors import SettingError, setting
from .engines.reader import engine_reader


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model's inputs go.

    Args:
        model: the reader.

    Returns:
        The input embeddings' device (which also works with ``device_map``), or an engine reader's own device.
    """
    reader = engine_reader(model)
    if reader is not None:
        return reader.device
    return model.get_input_embeddings().weight.device


def vocabulary_size(model) -> int | None:
    """How many token ids a model embeds: what every id given to it must be below
    ([`check_vocabulary`][hf_ralm.utils.checks.check_vocabulary]).

    Args:
        model: the reader.

    Returns:
        Its input embeddings' rows (else, an engine reader's for one, its config's ``vocab_size``), or ``None`` when
            it does not say.

    Examples:
        ```python
        vocabulary_size(model)   # 49152
        ```
    """
    try:
        return int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, NotImplementedError):  # a model without embeddings to ask, or an engine's reader
        pass
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text_config, "vocab_size", None)
    return size if isinstance(size, int) else None


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    forward = model.forward
    return _takes_logits_to_keep(getattr(forward, "__func__", forward))


@functools.lru_cache(maxsize=256)
def _takes_logits_to_keep(forward) -> bool:
    # by the forward function (a class's, or one set on an instance), read once: a decoding step calls this, and
    # inspect.signature costs more than a small model's step on a CPU
    return "logits_to_keep" in inspect.signature(forward).parameters


def one_logit_kwargs(model: torch.nn.Module) -> dict:
    """Keyword arguments that make a model compute the LM head at the last position only, when it can.

    Args:
        model: a transformers causal LM.

    Returns:
        ``{"logits_to_keep": 1}`` when its forward takes it, else nothing.
    """
    return {"logits_to_keep": 1} if _accepts_logits_to_keep(model) else {}


def cache_kwargs(model: torch.nn.Module, cache: DynamicCache | None) -> dict:
    """The keyword argument that hands ``cache`` to ``model``'s forward, under the name its transformers version uses.

    transformers renamed ``past_key_values`` to ``cache`` (the old name warns from 5.24 on and goes in 5.40); the
    oldest versions we support know only the old name, so the forward's own signature decides.

    Args:
        model: a transformers causal LM.
        cache: the KV cache (``None``: none).

    Returns:
        ``{name: cache}``, or nothing without a cache.
    """
    if cache is None:
        return {}
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return {name: cache}


def last_logits(model: torch.nn.Module, input_ids: torch.Tensor, keep: int, cache: DynamicCache | None = None
                ) -> torch.Tensor:
    """Logits of the last positions, computing the LM head only there when the model allows it.

    Args:
        model: a transformers causal LM.
        input_ids: a batch of inputs.
        keep: the last positions whose logits are returned.
        cache: a KV cache, extended in place with ``input_ids``' keys/values (``None``: none).

    Returns:
        The logits, ``(batch, keep, vocabulary)``.
    """
    kwargs: dict = {"use_cache": cache is not None, **cache_kwargs(model, cache)}
    if _accepts_logits_to_keep(model):
        kwargs["logits_to_keep"] = keep
    return model(input_ids=input_ids, **kwargs).logits[:, -keep:]


def empty_cache(model: torch.nn.Module) -> DynamicCache:
    """A fresh KV cache laid out for a model (sliding-window layers included).

    Args:
        model: a transformers causal LM.

    Returns:
        The empty cache.
    """
    return DynamicCache(config=model.config)


def stackable_rows(cache: DynamicCache) -> bool:
    """Whether [`cache_rows`][hf_ralm.core.modeling_utils.cache_rows] and
    [`stack_cache_rows`][hf_ralm.core.modeling_utils.stack_cache_rows] can take caches of ``cache``'s kind apart and put
    them together row by row.

    Args:
        cache: a KV cache.

    Returns:
        True when every layer is a dynamic one (full attention or sliding window), whose state is its keys/values
            and counts of tokens that rows of equal length share.
    """
    return bool(cache.layers) and all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer)
                                      for layer in cache.layers)


def _with_tensors(cache: DynamicCache, tensors: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A copy of ``cache``'s structure (its layers' token counts) holding ``tensors`` as each layer's keys/values."""
    new = copy.copy(cache)
    new.layers = []
    for layer, (keys, values) in zip(cache.layers, tensors):
        layer = copy.copy(layer)
        layer.keys, layer.values = keys, values
        new.layers.append(layer)
    return new


def cache_rows(cache: DynamicCache) -> list[DynamicCache]:
    """Each row of a batched cache as a cache of its own.

    Args:
        cache: a batched cache ([`stackable_rows`][hf_ralm.core.modeling_utils.stackable_rows]).

    Returns:
        One cache per row, its tensors copied out of the batch's (so the batch's memory goes with it).
    """
    return [_with_tensors(cache, [(layer.keys[i : i + 1].clone(), layer.values[i : i + 1].clone())
                                  for layer in cache.layers])
            for i in range(cache.layers[0].keys.shape[0])]


def stack_cache_rows(caches: Sequence[DynamicCache], repeats: Sequence[int]) -> DynamicCache:
    """One cache of several caches' rows, so that inputs with different passages of one length run in one batch.

    Args:
        caches: caches of one row each, all of one length
            ([`stackable_rows`][hf_ralm.core.modeling_utils.stackable_rows]); left as they are.
        repeats: how many rows each takes, in order.

    Returns:
        A cache of ``sum(repeats)`` rows.

    Examples:
        ```python
        batch = stack_cache_rows([rome_cache, paris_cache], [3, 2])   # 5 rows: rome's keys/values 3 times, then paris's
        ```
    """
    def stacked(name: str, i: int) -> torch.Tensor:
        return torch.cat([getattr(c.layers[i], name).expand(n, *getattr(c.layers[i], name).shape[1:])
                          for c, n in zip(caches, repeats)])

    return _with_tensors(caches[0], [(stacked("keys", i), stacked("values", i)) for i in range(len(caches[0].layers))])


def cache_nbytes(cache: DynamicCache) -> int:
    """The bytes held by the key/value tensors of a cache.

    Args:
        cache: a KV cache.

    Returns:
        The bytes.
    """
    total = 0
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def model_max_length(model) -> int | None:
    """The longest input a model takes.

    Args:
        model: the reader.

    Returns:
        What its config allows (``max_position_embeddings``, or GPT-2's ``n_positions``), or ``None`` when its config
            does not say; an engine reader's, the longest input its engine takes (``max_input_length``).
    """
    reader = engine_reader(model)
    if reader is not None:
        return reader.max_input_length
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    model_max = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(model_max) if model_max else None


def resolve_max_length(model, max_length: int | None) -> int:
    """The window length a model runs at.

    Args:
        model: the reader.
        max_length: the length asked for (``None``: the model's maximum).

    Returns:
        ``max_length``, or the model's maximum context when it is ``None``.

    Raises:
        SettingError: ``max_length`` is beyond the model's maximum (refused, not capped: a run at another length than
            its settings say would report figures of a configuration nobody asked for), or it is ``None`` and the
            model's maximum is unknown.
    """
    model_max = model_max_length(model)
    if max_length is None:
        if model_max is None:
            raise SettingError(f"The model's maximum length is unknown: pass {setting('max_length')}.")
        return model_max
    if model_max is not None and int(max_length) > model_max:
        source = "the longest input its engine takes" if engine_reader(model) is not None else \
            "its config's maximum"
        raise SettingError(f"{setting('max_length')} {max_length} exceeds the {model_max} positions this model has "
                           f"({source}): give at most {model_max}, or leave {setting('max_length')} out to "
                           "use them all.")
    return int(max_length)


def padding_id(tokenizer) -> int:
    """The id that left-pads a batch of prompts (generation, QA).

    A tokenizer needs no pad token for hf-ralm: padded positions are masked out by the attention mask and never
    scored or generated from, so any id works there (and evaluation batches windows of equal length, with no padding
    at all).

    Args:
        tokenizer: the reader's tokenizer.

    Returns:
        Its pad token, else its EOS, else 0.

    Examples:
        ```python
        padding_id(tokenizer)   # 0: a tokenizer without a pad token gives its EOS
        ```
    """
    return next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)


@dataclass
class PromptBatch:
    """Text prompts as one left-padded batch.

    Attributes:
        input_ids: the padded ids.
        attention_mask: 0 at padding, 1 at a prompt's tokens.
        lengths: per prompt, the tokens kept.
        truncated: per prompt, whether it was cut.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    lengths: list[int]
    truncated: list[bool]

    @property
    def width(self) -> int:
        """The padded length: a row's generated tokens start there."""
        return self.input_ids.shape[1]


def prompt_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[list[int]]:
    """Each row's prompt ids, its padding left out: what generation continues.

    Args:
        input_ids: a batch of prompts.
        attention_mask: 0 at padding, left or right (``None``: no padding).

    Returns:
        Per row, its ids where the mask is 1.

    Examples:
        >>> prompt_rows(torch.tensor([[0, 5, 6], [7, 8, 9]]), torch.tensor([[0, 1, 1], [1, 1, 1]]))
        [[5, 6], [7, 8, 9]]
    """
    if attention_mask is None:
        return input_ids.tolist()
    return [[t for t, m in zip(ids, mask) if m] for ids, mask in zip(input_ids.tolist(), attention_mask.tolist())]


def left_pad(tokenizer, prompts: Sequence[str], budget: int | None = None) -> PromptBatch:
    """Prompts as one left-padded batch: how generation and QA batch prompts.

    Args:
        tokenizer: the reader's tokenizer (its default special tokens are added).
        prompts: the prompts.
        budget: cut each from the left to this many tokens, keeping a leading BOS (``None``: no cut).

    Returns:
        The [`PromptBatch`][hf_ralm.core.modeling_utils.PromptBatch], padded with
            [`padding_id`][hf_ralm.core.modeling_utils.padding_id].

    Examples:
        ```python
        batch = left_pad(tokenizer, ["the emperor of rome", "rome"])
        batch.lengths, batch.attention_mask[1].tolist()   # ([4, 1], [0, 0, 0, 1])
        ```
    """
    encoded, truncated = [], []
    bos = tokenizer.bos_token_id
    for prompt in prompts:
        ids = list(tokenizer(prompt)["input_ids"])
        cut = budget is not None and len(ids) > budget
        if cut:
            ids = [ids[0]] + ids[len(ids) - budget + 1 :] if bos is not None and ids[0] == bos else ids[-budget:]
        encoded.append(ids)
        truncated.append(cut)
    width, pad = max(len(ids) for ids in encoded), padding_id(tokenizer)
    return PromptBatch(torch.tensor([[pad] * (width - len(ids)) + ids for ids in encoded]),
                       torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded]),
                       [len(ids) for ids in encoded], truncated)


def model_identity(model) -> dict[str, Any]:
    """What identifies a model in settings that must compare equal on another machine.

    Args:
        model: the reader.

    Returns:
        Its name (a local folder's name, not its path; a Hub id as it is; the class name when it has neither), class,
            parameter count and dtype. An engine reader's (a [`Reader`][hf_ralm.Reader]) has the same keys and its
            ``engine`` and ``engine_options`` (what its figures depend on); a transformers model's names no engine, so
            its runs' identities stay as they were.

    Examples:
        ```python
        model_identity(model)
        # {'reader': 'smollm2-135m-instruct', 'reader_class': 'LlamaForCausalLM', 'reader_parameters': 134515008,
        #  'dtype': 'bfloat16'}
        ```
    """
    reader = engine_reader(model)
    if reader is not None:  # the same keys, and the engine and the options its figures depend on
        return reader.identity()
    name = getattr(model.config, "name_or_path", None) or type(model).__name__
    return reader_identity(name, type(model).__name__, sum(p.numel() for p in model.parameters()), model.dtype)


def reader_identity(name_or_path: str, reader_class: str, parameters: int, dtype: torch.dtype | str
                    ) -> dict[str, Any]:
    """The keys of [`model_identity`][hf_ralm.model_identity] every reader has, whatever runs it.

    Args:
        name_or_path: a local folder (its name is kept, not its path) or a Hub id (kept as it is).
        reader_class: the model's class name.
        parameters: its parameter count.
        dtype: its precision.

    Returns:
        ``reader``, ``reader_class``, ``reader_parameters`` and ``dtype``.

    Examples:
        >>> reader_identity("HuggingFaceTB/SmolLM2-135M", "LlamaForCausalLM", 134515008, torch.bfloat16)
        {'reader': 'HuggingFaceTB/SmolLM2-135M', 'reader_class': 'LlamaForCausalLM', 'reader_parameters': 134515008, \
'dtype': 'bfloat16'}
    """
    name = os.path.basename(os.path.normpath(name_or_path)) if os.path.isdir(name_or_path) else name_or_path
    return {"reader": name, "reader_class": reader_class, "reader_parameters": parameters,
            "dtype": str(dtype).removeprefix("torch.")}


def model_path(model) -> str:
    """Where a model was loaded from: what ``reproduce`` records.

    Args:
        model: a transformers model.

    Returns:
        A local folder's absolute path, else the model's name.
    """
    name = getattr(model.config, "name_or_path", None) or type(model).__name__
    return os.path.abspath(name) if os.path.isdir(name) else name
