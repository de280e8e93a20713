"""Probability ensembles in evaluation (REPLUG-style; ``RalmConfig.ensemble_size`` n > 1).

Each window after the first runs once per passage of its top ``n`` (fewer when fewer were found), the passage written
over its start as a single passage is, and every scored token gets the mixture

    p(x_i | x_<i) = Σ_j w_j · p(x_i | [d_j; x_<i]),   w = softmax(s / τ)

of the retrieval scores ``s`` of the window's passages (``τ`` = ``ensemble_temperature``), computed in log space:
``-log p = -logsumexp_j(log w_j - NLL_j)``. A window with one passage is that passage's window; one without (window
0, an empty retrieval, a closed retrieval gate) is the plain window. The candidate inputs of many windows run batched
through :func:`~hf_ralm.selection.rerank.reader_nlls` (the reranker's scorer), each distinct passage's keys/values
computed once. Generation mixes the same way (``RalmLogitsProcessor(ensemble_size=n)``), with the same weights
(:func:`ensemble_log_weights`).

Example:
    >>> ensemble_log_weights([2.0, 1.0], temperature=1.0).exp()
    tensor([0.7311, 0.2689], dtype=torch.float64)
    >>> mix_nlls([torch.tensor([1.0]), torch.tensor([3.0])], ensemble_log_weights([0.0, 0.0], 1.0))
    tensor([1.5662], dtype=torch.float64)
"""

from __future__ import annotations

from typing import Sequence

import torch
from ..utils.progress import tqdm

from ..config.configuration_ralm import RalmConfig
from .model_inputs import context_indices
from ..config.passages import Passage
from .scoring import reader_nlls
from ..config.windows import Window


def ensemble_log_weights(scores: Sequence[float], temperature: float) -> torch.Tensor:
    """``log softmax(scores / temperature)`` in float64: the log mixture weights of passages with these retrieval
    scores."""
    return torch.log_softmax(torch.tensor([float(s) for s in scores], dtype=torch.float64) / temperature, dim=0)


def mix_nlls(rows: Sequence[torch.Tensor], log_weights: torch.Tensor) -> torch.Tensor:
    """The mixture's NLL per token, ``-logsumexp_j(log w_j - rows[j])``, from each member's per-token NLLs."""
    return -torch.logsumexp(log_weights[:, None] - torch.stack([row.double() for row in rows]), dim=0)


def ensemble_members(windows: Sequence[Window], passages: Sequence[Sequence[Passage]], chosen: Sequence[int] | None,
                     ensemble_size: int) -> list[list[Passage]]:
    """Per window, the passages it mixes: its top ``ensemble_size`` (:func:`~hf_ralm.core.model_inputs.context_indices`
    of ``chosen``, whose -1 marks a window without a passage; by default every window's top), none for window 0."""
    members = []
    for w in windows:
        found = passages[w.index] if w.has_retrieval else []
        choice = 0 if chosen is None else chosen[w.index]
        members.append([found[i] for i in context_indices(choice, len(found), ensemble_size)])
    return members


def ensemble_member_nlls(
    model,
    tokenizer,
    ids: Sequence[int],
    windows: Sequence[Window],
    passages: Sequence[Sequence[Passage]],
    config: RalmConfig,
    chosen: Sequence[int] | None = None,
    batch_size: int = 8,
    reuse_prefix_kv: bool = True,
    show_progress: bool = True,
) -> tuple[list[list[Passage]], list[list[torch.Tensor]]]:
    """Per window, the passages it mixes (:func:`ensemble_members` of ``config.ensemble_size``) and each one's NLLs
    (float64) of the window's scored tokens; a window without passages has one row, of the plain window. The members
    of an ensemble of n are the first n of a larger one's, so one pass serves every smaller n
    (:func:`mix_window_nlls` of the first n; of all of them, the ensemble's NLL of every token)."""
    members = ensemble_members(windows, passages, chosen, config.ensemble_size)
    options = [found or [None] for found in members]
    firsts = [w.score_begin for w in windows]
    with tqdm(total=len(windows), desc=f"Scoring ensembles of {config.ensemble_size}", unit="win",
              disable=not show_progress, leave=None) as progress:
        rows = list(reader_nlls(model, tokenizer, ids, windows, options, firsts, config, batch_size, reuse_prefix_kv,
                                progress=progress))
    return members, rows


def mix_window_nlls(windows: Sequence[Window], scores: Sequence[Sequence[float]],
                    rows: Sequence[Sequence[torch.Tensor]], num_tokens: int, temperature: float) -> torch.Tensor:
    """NLL of every token (a float64 tensor of ``num_tokens``, NaN for token 0) when each window mixes its members,
    whose retrieval ``scores`` give the weights at ``temperature``, with their ``rows`` of NLLs
    (:func:`ensemble_member_nlls`; the first ``len(scores[i])`` rows of window i); a window without members takes its
    one row."""
    nll = torch.full((num_tokens,), float("nan"), dtype=torch.float64)
    for w, found, window_rows in zip(windows, scores, rows):
        if found:
            log_weights = ensemble_log_weights(found, temperature)
            nll[w.score_begin : w.end] = mix_nlls(window_rows[: len(found)], log_weights)
        else:
            nll[w.score_begin : w.end] = window_rows[0]
    return nll
