"""The evaluation as a causal LM's ``forward``, what
[`RetrievalAugmentedModel.forward`][hf_ralm.RetrievalAugmentedModel.forward] runs: rows of token ids (right-padded,
with labels as transformers spells them), each row scored with retrieval, and the rows' figures put together as a
[`RalmCausalLMOutput`][hf_ralm.RalmCausalLMOutput].

Examples:
    ```python
    out = causal_lm_output(model.language_model, ids, attention_mask=None, labels=None,
                           score_row=model.evaluate_perplexity)
    out.loss, out.token_nlls.shape
    ```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from transformers.utils import ModelOutput

from ..core.modeling_utils import vocabulary_size
from ..core.passages import Passage
from ..utils.checks import check_vocabulary, refuse_type
from .pipeline import RalmEvalResult


@dataclass
class RalmCausalLMOutput(ModelOutput):
    """Like ``CausalLMOutput``: ``loss`` is the mean NLL over the scored tokens of all rows.

    Attributes:
        loss: the mean NLL over the scored tokens of all rows.
        token_nlls: ``token_nlls[b, t]`` is the NLL of token ``t`` of row ``b`` (NaN where not scored: token 0,
            padding, ignored labels).
        token_windows: ``token_windows[b, t]`` is the window that scored token ``t`` of row ``b`` (-1 where none did).
        passages: ``passages[b][window]`` are the passages retrieved for that window of row ``b`` (the first was in
            context; an empty list means none was).
    """

    loss: torch.FloatTensor | None = None
    token_nlls: torch.FloatTensor | None = None
    token_windows: torch.LongTensor | None = None
    passages: list[list[list[Passage]]] | None = None


def causal_lm_output(reader: Any, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None,
                     labels: torch.LongTensor | None,
                     score_row: Callable[[list[int]], RalmEvalResult]) -> RalmCausalLMOutput:
    """Score every row of ``input_ids`` with ``score_row`` and put the rows' figures together.

    Args:
        reader: the reader, whose vocabulary the ids are checked against.
        input_ids: the token ids, 1-D or 2-D with a row per text.
        attention_mask: for right-padded rows, 1 on each row's tokens.
        labels: equal to ``input_ids``, with ``-100`` where a token must not count in the loss.
        score_row: what evaluates one row's token ids with retrieval.

    Returns:
        The [`RalmCausalLMOutput`][hf_ralm.RalmCausalLMOutput] of the rows.

    Raises:
        InputTypeError: ``input_ids`` is no 1-D or 2-D tensor.
        SettingError: an id is outside the reader's vocabulary.
        ValueError: ``labels`` differ from ``input_ids`` other than by ``-100``.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() not in (1, 2):
        refuse_type("input_ids", input_ids, "a tensor of token ids (1-D, or 2-D with a row per text)")
    check_vocabulary("input_ids", input_ids.tolist(), vocabulary_size(reader))
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    # a 1-D mask or labels go with a 1-D row (indexing them per row as 2-D would read single elements)
    if attention_mask is not None and attention_mask.dim() == 1:
        attention_mask = attention_mask[None]
    if labels is not None and labels.dim() == 1:
        labels = labels[None]
    if labels is not None and bool(((labels != -100) & (labels != input_ids)).any()):
        raise ValueError("labels must equal input_ids (with -100 where a token is ignored): RALM scores the text.")
    rows, nlls, windows_of = [], [], []
    for b in range(input_ids.shape[0]):
        length = int(attention_mask[b].sum()) if attention_mask is not None else input_ids.shape[1]
        result = score_row(input_ids[b, :length].tolist())
        row_nll = torch.full(input_ids.shape[1:], float("nan"), dtype=torch.float64)
        row_nll[:length] = result.token_nlls
        row_windows = torch.full(input_ids.shape[1:], -1, dtype=torch.long)
        row_windows[:length] = result.token_windows
        rows.append(result.in_context())
        nlls.append(row_nll)
        windows_of.append(row_windows)
    token_nlls = torch.stack(nlls)
    if labels is not None:
        token_nlls[labels.cpu() == -100] = float("nan")
    scored = ~torch.isnan(token_nlls)
    loss = token_nlls[scored].mean().float() if scored.any() else torch.tensor(float("nan"))
    return RalmCausalLMOutput(loss=loss, token_nlls=token_nlls.float(), token_windows=torch.stack(windows_of),
                              passages=rows)
