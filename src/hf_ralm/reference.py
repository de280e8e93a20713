"""The plain reference loop: one window at a time, batch 1, logits for every position, as the paper's
``eval_lm.py`` runs it. Slow by design; the tests hold the fast scorer to it and the benchmark times against it."""

from __future__ import annotations

from typing import Sequence

import torch

from .modeling_utils import model_device
from .windows import Window


@torch.inference_mode()
def reference_window_nlls(
    model, ids: Sequence[int], windows: Sequence[Window], prefixes: Sequence[Sequence[int]]
) -> torch.Tensor:
    """Per-token NLLs (float64, NaN for token 0) from a full forward of every window with its prefix written over
    its first positions."""
    device = model_device(model)
    nll = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    for w in windows:
        window = torch.tensor(ids[w.begin : w.end], device=device)
        prefix = torch.tensor(prefixes[w.index][: w.length], dtype=torch.long, device=device)
        inputs = window.clone()
        inputs[: len(prefix)] = prefix
        logits = model(inputs[None]).logits[0].float()
        # position i predicts token i + 1; keep the predictions of the scored tokens only
        first = w.score_begin - w.begin
        predicted = logits[first - 1 : w.length - 1]
        targets = window[first:]
        token_nll = torch.nn.functional.cross_entropy(predicted, targets, reduction="none")
        nll[w.score_begin : w.end] = token_nll.double().cpu()
    return nll
