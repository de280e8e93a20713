"""Greedy answers of a causal LM to QA prompts, in left-padded batches."""

from __future__ import annotations

from typing import Sequence

from ...errors import SettingError, setting


MAX_NEW_TOKENS = 10
"""Tokens generated per answer by default (answers are short: ``first_line`` keeps the first line)."""


class Answerer:
    """Greedy answers of a causal LM to prompts: left-padded batches, each prompt cut from the left to
    ``max_length - max_new_tokens`` tokens (``max_length``: the model's maximum by default)."""

    def __init__(self, model, tokenizer, max_new_tokens: int, max_length: int | None):
        from transformers import GenerationConfig

        from ...core.modeling_utils import model_device, padding_id, resolve_max_length

        self.model, self.tokenizer = model, tokenizer
        self.max_length = resolve_max_length(model, max_length)
        self.budget = self.max_length - max_new_tokens
        if self.budget < 1:
            raise SettingError(f"{setting('max_length')} ({self.max_length}) leaves no room for a prompt and "
                               f"{max_new_tokens} new tokens.")
        self.pad_id = padding_id(tokenizer)
        eos = model.generation_config.eos_token_id
        self.generation_config = GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=self.pad_id,
            eos_token_id=eos if eos is not None else tokenizer.eos_token_id,
        )
        self.device = model_device(model)

    def answer(self, prompts: Sequence[str]) -> list[dict]:
        """Per prompt: the decoded ``generation``, the ``prompt_tokens`` it was given and whether it was
        ``truncated``."""
        import torch

        from ...core.modeling_utils import left_pad

        batch = left_pad(self.tokenizer, prompts, self.budget)
        with torch.no_grad():
            generated = self.model.generate(input_ids=batch.input_ids.to(self.device),
                                            attention_mask=batch.attention_mask.to(self.device),
                                            generation_config=self.generation_config)
        new_ids = generated[:, batch.width :].tolist()
        return [{"generation": self.tokenizer.decode(ids, skip_special_tokens=True), "prompt_tokens": length,
                 "truncated": cut} for ids, cut, length in zip(new_ids, batch.truncated, batch.lengths)]
