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


@torch.inference_mode()
def reference_rerank_nlls(
    model, ids: Sequence[int], windows: Sequence[Window], candidate_prefixes: Sequence[Sequence[Sequence[int]]],
    rerank_tokens: int,
) -> tuple[list[int], torch.Tensor]:
    """The reference's ``logprob`` reranking: per window one ``(k, L)`` batch of its candidates' inputs with logits for
    every position; the candidate with the lowest summed NLL of the ``rerank_tokens`` text tokens before the window's
    scored tokens is chosen and its row scores the window. ``candidate_prefixes[w.index]`` lists what each candidate
    writes over the window (a single entry: nothing to rank). Returns the choices and the per-token NLLs."""
    device = model_device(model)
    nll = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    chosen = []
    for w in windows:
        window = torch.tensor(ids[w.begin : w.end], device=device)
        inputs = window.repeat(len(candidate_prefixes[w.index]), 1)
        for row, prefix in zip(inputs, candidate_prefixes[w.index]):
            prefix = torch.tensor(prefix[: w.length], dtype=torch.long, device=device)
            row[: len(prefix)] = prefix
        logits = model(inputs).logits.float()
        # row by row over (positions, vocabulary): the (batch, vocabulary, positions) layout of cross_entropy loses
        # ~1e-4 nats per token in float32 over a 50k vocabulary
        token_nll = torch.stack([torch.nn.functional.cross_entropy(row[:-1], window[1:], reduction="none")
                                 for row in logits]).double().cpu()
        first = w.score_begin - w.begin  # token_nll[:, t - 1] is the NLL of window position t
        ranking = token_nll[:, max(1, first - rerank_tokens) - 1 : first - 1].sum(dim=1)
        best = int(torch.argmin(ranking)) if len(inputs) > 1 else 0  # argmin: the first of equal values
        chosen.append(best)
        nll[w.score_begin : w.end] = token_nll[best, first - 1 :]
    return chosen, nll
