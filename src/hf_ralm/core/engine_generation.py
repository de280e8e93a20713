"""Generation on an engine reader (a [`Reader`][hf_ralm.Reader]): the engine continues token prompts itself, so
hf-ralm asks it, per row, for a number of new tokens drawn as a
[`EngineSampling`][hf_ralm.core.engine_generation.EngineSampling] says (what a ``transformers`` generation config
gives: greedy or sampling with temperature, top-k, top-p and min-p, the end-of-sequence ids) and cuts each row where
transformers' ``generate`` would stop it ([`cut_at_stop`][hf_ralm.core.engine_generation.cut_at_stop]: after its
first end-of-sequence token, or after the token that completes a stop string).

What an engine reader offers for it is one method, ``continue_prompts(continuations, sampling)``: per
[`Continuation`][hf_ralm.core.engine_generation.Continuation] (token ids, how many new tokens, a seed), the new token
ids, all rows in one engine call. [`generate_on_engine`][hf_ralm.core.engine_generation.generate_on_engine] is the
reader's own ``generate`` (no retrieval: eval-qa's answers); In-Context RALM's stride loop
([`hf_ralm.generation.engine`][hf_ralm.generation.engine]) calls it once per stride. Sampling draws each row's tokens of
a call with a seed of its own ([`StrideSeeds`][hf_ralm.core.engine_generation.StrideSeeds]), made from torch's random
state, so ``torch.manual_seed`` (or ``transformers.set_seed``) makes a run reproducible whatever the engine's batching.

Examples:
    ```python
    sampling, _ = EngineSampling.of(reader, None, {"max_new_tokens": 8}, input_width=5)
    reader.continue_prompts([Continuation((1, 2, 3, 4, 5), 8)], sampling)   # [[...8 new token ids...]]
    ```
"""

from __future__ import annotations

import copy
import random
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import SettingError, setting

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig

DEFAULTS = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": 0.0, "max_length": 20}
"""transformers' values of the generation settings an engine reader takes, where neither the call nor the model's
generation config gives one (the engine's own defaults differ: its top-k is off)."""

NOT_ON_ENGINE: dict[str, tuple] = {
    "num_beams": (None, 1), "num_return_sequences": (None, 1), "num_beam_groups": (None, 1),
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0), "no_repeat_ngram_size": (None, 0),
    "typical_p": (None, 1.0), "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0), "top_h": (None,),
    "min_length": (None, 0), "min_new_tokens": (None, 0), "max_time": (None,), "bad_words_ids": (None,),
    "suppress_tokens": (None,), "begin_suppress_tokens": (None,), "sequence_bias": (None,),
    "forced_bos_token_id": (None,), "forced_eos_token_id": (None,), "exponential_decay_length_penalty": (None,),
    "renormalize_logits": (None, False), "remove_invalid_values": (None, False), "guidance_scale": (None, 1.0),
    "penalty_alpha": (None,), "dola_layers": (None,), "diversity_penalty": (None, 0.0), "constraints": (None,),
    "force_words_ids": (None,), "prompt_lookup_num_tokens": (None,), "watermarking_config": (None,),
    "token_healing": (None, False), "output_scores": (None, False), "output_logits": (None, False),
    "output_attentions": (None, False), "output_hidden_states": (None, False),
}
"""The generation settings an engine reader does not apply (they act on the logits in this process, or ask for
them), each with the values that leave decoding as it is: another value is refused in one line."""

CALL_ARGUMENTS = ("attention_mask", "input_ids", "use_cache", "tokenizer")
"""What ``generate`` takes besides generation settings that an engine reader understands (``use_cache``: the
engine's own business)."""


@dataclass(frozen=True)
class EngineSampling:
    """How an engine reader draws new tokens, made from a ``transformers`` generation config
    ([`of`][hf_ralm.core.engine_generation.EngineSampling.of]).

    Attributes:
        max_new_tokens: the new tokens per row (fewer when it stops).
        do_sample: sample (else greedy).
        temperature: the sampling temperature.
        top_k: keep the ``top_k`` likeliest tokens (0: off).
        top_p: keep the likeliest tokens whose probabilities sum to ``top_p``.
        min_p: drop the tokens less likely than ``min_p`` times the likeliest.
        eos_token_ids: a row stops after any of these.
        pad_token_id: fills a row that stopped early in the returned ids.
        stop_strings: a row stops after a token that completes one of these in its generated text.
        return_dict_in_generate: ``generate`` returns a ``GenerateDecoderOnlyOutput`` instead of the ids.

    Examples:
        >>> from transformers import GenerationConfig
        >>> reader = type("Reader", (), {"generation_config": GenerationConfig(eos_token_id=2)})()
        >>> sampling, _ = EngineSampling.of(reader, None, {"max_new_tokens": 4, "do_sample": True, "top_p": 0.9}, 3)
        >>> sampling.top_k, sampling.top_p, sampling.eos_token_ids, sampling.pad_token_id
        (50, 0.9, (2,), 2)
        >>> EngineSampling.of(reader, None, {"max_new_tokens": 4, "repetition_penalty": 1.2}, 3)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: repetition_penalty is not applied by an engine reader (it would act on the \
logits in this process): drop it, or generate with engine transformers.
    """

    max_new_tokens: int
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    stop_strings: tuple[str, ...] = ()
    return_dict_in_generate: bool = False

    @classmethod
    def of(cls, reader, generation_config: GenerationConfig | None, kwargs: Mapping[str, Any], input_width: int
           ) -> tuple[EngineSampling, dict[str, Any]]:
        """The sampling a ``generate(generation_config=..., **kwargs)`` call asks of ``reader``.

        Args:
            reader: the engine reader (its ``generation_config`` is the default).
            generation_config: the call's generation config (``None``: the reader's).
            kwargs: the call's other keyword arguments; generation settings among them update the config as
                transformers updates it.
            input_width: the prompts' width in tokens, which ``max_length`` counts.

        Returns:
            The sampling, and the call's arguments that are no generation settings (``attention_mask``, ...).

        Raises:
            SettingError: a setting the engine does not apply (``NOT_ON_ENGINE``: those that act on the logits in this
                process, such as ``repetition_penalty``, or ask for them), an argument it does not take, no room for
                a new token, or sampling at a temperature of 0; each in one line.
        """
        config = copy.deepcopy(generation_config if generation_config is not None else reader.generation_config)
        rest = config.update(**kwargs)
        unknown = sorted(set(rest) - set(CALL_ARGUMENTS))
        if unknown:
            raise SettingError(f"{', '.join(unknown)}: not taken by generation on an engine reader (no logits "
                               "processors, stopping criteria or streamers run in this process); drop "
                               f"{'it' if len(unknown) == 1 else 'them'}, or generate with {setting('engine')} "
                               "transformers.")
        for name, neutral in NOT_ON_ENGINE.items():
            value = getattr(config, name, None)
            if value not in neutral:
                raise SettingError(f"{setting(name)} is not applied by an engine reader (it would act on the logits "
                                   "in this process): drop it, or generate with "
                                   f"{setting('engine')} transformers.")

        def value(name: str):
            given = getattr(config, name, None)
            return DEFAULTS[name] if given is None else given

        max_new = config.max_new_tokens
        if max_new is None:
            max_new = value("max_length") - input_width
        if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
            raise SettingError(f"{setting('max_new_tokens')} must be at least 1 (or max_length above the prompts' "
                               f"{input_width} tokens), got {max_new!r}.")
        eos = config.eos_token_id
        eos = () if eos is None else tuple(int(t) for t in (eos if isinstance(eos, (list, tuple)) else [eos]))
        pad = config.pad_token_id
        stops = config.stop_strings
        stops = () if stops is None else (stops,) if isinstance(stops, str) else tuple(stops)
        sampling = cls(max_new_tokens=max_new, do_sample=bool(value("do_sample")),
                       temperature=float(value("temperature")), top_k=int(value("top_k")),
                       top_p=float(value("top_p")), min_p=float(value("min_p")), eos_token_ids=eos,
                       pad_token_id=int(pad) if pad is not None else (eos[0] if eos else None), stop_strings=stops,
                       return_dict_in_generate=bool(config.return_dict_in_generate))
        if sampling.do_sample and not sampling.temperature > 0:
            raise SettingError(f"{setting('temperature')} must be above 0 when sampling, got {sampling.temperature}.")
        return sampling, rest


@dataclass(frozen=True)
class Continuation:
    """One row of an engine call: its token ids, how many new tokens to draw (fewer when it stops), and the seed its
    tokens are drawn with when sampling (``None``: greedy)."""

    prompt: tuple[int, ...]
    max_tokens: int
    seed: int | None = None


class StrideSeeds:
    """The seeds of a sampling run: one per row and engine call.

    Each is made from a base drawn from torch's random state when the run starts (so ``torch.manual_seed`` fixes
    them, and two runs in a row differ as transformers' do), the row's prompt (and how many identical prompts come
    before it) and the call's number: a row's tokens do not depend on which other rows share its calls, or in which
    order.

    Args:
        prompts: the run's prompts, one per row, as token ids.

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> seeds = StrideSeeds([[5, 6], [7], [5, 6]])
        >>> _ = torch.manual_seed(0)
        >>> alone = StrideSeeds([[7]])
        >>> seeds.seed(row=1, call=2) == alone.seed(row=0, call=2), seeds.seed(0, 0) == seeds.seed(2, 0)
        (True, False)
    """

    def __init__(self, prompts: Sequence[Sequence[int]]):
        import torch

        base = int(torch.randint(0, 2**62, ()).item())
        seen: dict[tuple[int, ...], int] = {}
        self.keys = []
        for prompt in prompts:
            prompt = tuple(prompt)
            seen[prompt] = seen.get(prompt, -1) + 1
            self.keys.append(f"{base}:{zlib.crc32(repr(prompt).encode())}:{len(prompt)}:{seen[prompt]}")

    def seed(self, row: int, call: int) -> int:
        """The seed a row's tokens are drawn with in one engine call.

        Args:
            row: the row (its index among the run's prompts).
            call: the run's engine call, from 0.

        Returns:
            A 63-bit seed.
        """
        return random.Random(f"{self.keys[row]}:{call}").getrandbits(63)


def cut_at_stop(tokenizer, generated: Sequence[int], new: Sequence[int], sampling: EngineSampling
                ) -> tuple[list[int], bool]:
    """The new tokens a row keeps, and whether it stops there.

    A row stops with its first end-of-sequence token, or with the first token whose text completes one of the stop
    strings in the row's generated text (as transformers' ``stop_strings`` stop it).

    Args:
        tokenizer: decodes the generated text for the stop strings (``None`` will do without them).
        generated: the row's tokens generated before.
        new: the tokens the engine drew now.
        sampling: the run's sampling (its ``eos_token_ids`` and ``stop_strings``).

    Returns:
        The tokens of ``new`` kept (up to and with the one that stops the row), and whether the row stops.

    Raises:
        SettingError: stop strings are set and no tokenizer is given.

    Examples:
        >>> cut_at_stop(None, [5], [6, 2, 7], EngineSampling(4, eos_token_ids=(2,)))
        ([6, 2], True)
    """
    new = list(new)
    end = next((i + 1 for i, token in enumerate(new) if token in sampling.eos_token_ids), None)
    if end is not None:
        new = new[:end]
    if sampling.stop_strings:
        if tokenizer is None:
            raise SettingError(f"{setting('stop_strings')} need the tokenizer to read the generated text: pass "
                               "tokenizer= to generate.")

        def stops(tokens: Sequence[int]) -> bool:
            text = tokenizer.decode([*generated, *tokens])
            return any(stop in text for stop in sampling.stop_strings)

        if stops(new):  # the first token whose text completes one
            return new[: next(i + 1 for i in range(len(new)) if stops(new[: i + 1]))], True
    return new, end is not None


def generate_on_engine(reader, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                       generation_config: GenerationConfig | None = None, **kwargs) -> torch.Tensor:
    """An engine reader's ``generate``, as transformers' takes it for a causal LM: every row continued in one engine
    call. No retrieval: the prompts are given whole (eval-qa's passages are in them).

    Args:
        reader: the engine reader.
        input_ids: the prompts, maybe left-padded.
        attention_mask: 0 at the padding.
        generation_config: the generation settings (``None``: the reader's).
        **kwargs: generation settings (those of [`EngineSampling`][hf_ralm.core.engine_generation.EngineSampling]),
            and ``tokenizer`` for stop strings.

    Returns:
        What ``generate`` returns: the prompts, then the new tokens, a row that stopped early padded with the pad id.

    Raises:
        SettingError: a setting or an argument the engine does not apply
            ([`EngineSampling.of`][hf_ralm.core.engine_generation.EngineSampling.of]).

    Examples:
        ```python
        reader.generate(input_ids=batch.input_ids, attention_mask=batch.attention_mask, max_new_tokens=10)
        ```
    """
    import torch

    from .modeling_utils import prompt_rows

    if input_ids is None:
        input_ids = kwargs.pop("inputs", None)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError("generate on an engine reader takes input_ids, a 2-D tensor of token ids (a row per prompt).")
    sampling, rest = EngineSampling.of(reader, generation_config, kwargs, input_ids.shape[1])
    if sampling.return_dict_in_generate:
        raise SettingError(f"{setting('return_dict_in_generate')}: an engine reader's generate returns the token ids "
                           "(it has no scores to add); drop it.")
    rows = prompt_rows(input_ids, attention_mask)
    seeds = StrideSeeds(rows) if sampling.do_sample else None
    calls = [Continuation(tuple(row), sampling.max_new_tokens, seeds.seed(b, 0) if seeds else None)
             for b, row in enumerate(rows)]
    outputs = reader.continue_prompts(calls, sampling)
    new = [cut_at_stop(rest.get("tokenizer"), [], tokens, sampling)[0] for tokens in outputs]
    return append_tokens(input_ids, new, sampling.pad_token_id)


def append_tokens(input_ids: torch.Tensor, new: Sequence[Sequence[int]], pad_token_id: int | None) -> torch.Tensor:
    """The ``sequences`` transformers' ``generate`` returns.

    Args:
        input_ids: the prompts.
        new: each row's new tokens.
        pad_token_id: pads the rows that have fewer.

    Returns:
        ``input_ids`` followed by each row's new tokens.

    Raises:
        SettingError: rows differ in length and there is no pad id.

    Examples:
        >>> import torch
        >>> append_tokens(torch.tensor([[0, 5], [6, 7]]), [[8, 2], [9]], pad_token_id=0).tolist()
        [[0, 5, 8, 2], [6, 7, 9, 0]]
    """
    import torch

    width = max((len(tokens) for tokens in new), default=0)
    if any(len(tokens) < width for tokens in new) and pad_token_id is None:
        raise SettingError(f"Rows that stop early are padded with {setting('pad_token_id')}, which neither the call "
                           "nor the model's generation config gives: pass pad_token_id=.")
    tail = torch.tensor([list(tokens) + [pad_token_id] * (width - len(tokens)) for tokens in new],
                        dtype=input_ids.dtype).reshape(len(new), width)
    return torch.cat([input_ids, tail.to(input_ids.device)], dim=1)
