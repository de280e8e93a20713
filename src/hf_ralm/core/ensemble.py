"""Probability ensembles in evaluation (REPLUG-style; ``RalmConfig.ensemble_size`` n > 1).

Each window after the first runs once per passage of its top ``n`` (fewer when fewer were found), the passage written
over its start as a single passage is, and every scored token gets the mixture

    p(x_i | x_<i) = Σ_j w_j · p(x_i | [d_j; x_<i]),   w = softmax(s / τ)

of the retrieval scores ``s`` of the window's passages (``τ`` = ``ensemble_temperature``), computed in log space:
``-log p = -logsumexp_j(log w_j - NLL_j)``. A window with one passage is that passage's window; one without (window
0, an empty retrieval, a closed retrieval gate) is the plain window. The candidate inputs of many windows run batched
through [`reader_nlls`][hf_ralm.core.scoring.reader_nlls] (the reranker's scorer), each distinct passage's keys/values
computed once. Generation mixes the same way (``RalmLogitsProcessor(ensemble_size=n)``), with the same weights
([`ensemble_log_weights`][hf_ralm.core.ensemble.ensemble_log_weights]).

Examples:
    >>> ensemble_log_weights([2.0, 1.0], temperature=1.0).exp()
    tensor([0.7311, 0.2689], dtype=torch.float64)
    >>> mix_nlls([torch.tensor([1.0]), torch.tensor([3.0])], ensemble_log_weights([0.0, 0.0], 1.0))
    tensor([1.5662], dtype=torch.float64)
"""

from __future__ import annotations

from typing import Sequence

import torch
from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..utils.progress import tqdm

from ..config.configuration_ralm import RalmConfig
from .model_inputs import context_indices
from .passages import Passage
from .scoring import reader_nlls
from .windows import Window


def ensemble_log_weights(scores: Sequence[float], temperature: float) -> torch.Tensor:
    """The log mixture weights of passages with these retrieval scores.

    Args:
        scores: the passages' retrieval scores.
        temperature: ``τ`` (``ensemble_temperature``).

    Returns:
        ``log softmax(scores / temperature)``, float64.
    """
    return torch.log_softmax(torch.tensor([float(s) for s in scores], dtype=torch.float64) / temperature, dim=0)


def mix_nlls(rows: Sequence[torch.Tensor], log_weights: torch.Tensor) -> torch.Tensor:
    """The mixture's NLL per token.

    Args:
        rows: each member's per-token NLLs.
        log_weights: the members' log weights
            ([`ensemble_log_weights`][hf_ralm.core.ensemble.ensemble_log_weights]).

    Returns:
        ``-logsumexp_j(log w_j - rows[j])`` per token, float64.
    """
    return -torch.logsumexp(log_weights[:, None] - torch.stack([row.double() for row in rows]), dim=0)


def ensemble_members(windows: Sequence[Window], passages: Sequence[Sequence[Passage]], chosen: Sequence[int] | None,
                     ensemble_size: int) -> list[list[Passage]]:
    """The passages each window mixes.

    Args:
        windows: the windows.
        passages: each window's retrieved passages, by window index.
        chosen: per window index, the passage the members start from (-1: a window without a passage); ``None``:
            every window's top.
        ensemble_size: the members per window.

    Returns:
        Per window, its top ``ensemble_size`` from the chosen one on
            ([`context_indices`][hf_ralm.core.model_inputs.context_indices]); none for window 0.
    """
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
    *,
    config: RalmConfig,
    chosen: Sequence[int] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    reuse_prefix_kv: bool = True,
    show_progress: bool = True,
) -> tuple[list[list[Passage]], list[list[torch.Tensor]]]:
    """Per window, the passages it mixes and each one's NLLs of the window's scored tokens.

    The members of an ensemble of n are the first n of a larger one's, so one pass serves every smaller n
    ([`mix_window_nlls`][hf_ralm.mix_window_nlls] of the first n rows; of all of them, the ensemble's NLL of every
    token).

    Args:
        model: the reader.
        tokenizer: its tokenizer (the passages' text becomes its tokens).
        ids: the evaluated text's token ids.
        windows: the windows to score (a plan's, or a chunk of them).
        passages: each window's retrieved passages, by window index.
        config: the settings: ``ensemble_size`` members per window, their prefixes as ``max_doc_tokens`` and the
            passage template make them.
        chosen: per window index, the passage the members start from (-1: a window without a passage); by default
            each window's top passage.
        batch_size: the candidate inputs scored in one forward pass.
        reuse_prefix_kv: compute each distinct passage's keys/values once and reuse them.
        show_progress: show a progress bar of the windows.

    Returns:
        The members of each window (its top ``config.ensemble_size`` from ``chosen`` on; none for window 0), and per
            window one float64 row of NLLs per member (a window without members has one row, of the plain window).
    """
    members = ensemble_members(windows, passages, chosen, config.ensemble_size)
    options = [found or [None] for found in members]
    firsts = [w.score_begin for w in windows]
    with tqdm(total=len(windows), desc=f"Scoring ensembles of {config.ensemble_size}", unit="win",
              disable=not show_progress, leave=None) as progress:
        rows = list(reader_nlls(model, tokenizer, ids, windows, options, firsts=firsts, config=config,
                                batch_size=batch_size, reuse_prefix_kv=reuse_prefix_kv,
                                progress=progress))
    return members, rows


def mix_window_nlls(windows: Sequence[Window], scores: Sequence[Sequence[float]],
                    rows: Sequence[Sequence[torch.Tensor]], num_tokens: int, temperature: float) -> torch.Tensor:
    """The NLL of every token when each window mixes its members' next-token probabilities.

    Args:
        windows: the windows the rows are of.
        scores: per window, its members' retrieval scores, which weigh them (``softmax(scores / temperature)``); the
            first ``len(scores[i])`` rows of window ``i`` are mixed.
        rows: per window, its members' NLL rows ([`ensemble_member_nlls`][hf_ralm.ensemble_member_nlls]).
        num_tokens: the evaluated text's tokens.
        temperature: ``τ`` of the weights (``ensemble_temperature``).

    Returns:
        A float64 tensor of ``num_tokens`` NLLs, NaN for token 0; a window without members takes its one row.

    Examples:
        >>> from hf_ralm import plan_windows
        >>> window = plan_windows(3, 8, 4)[0]   # one window, scoring tokens 1 and 2
        >>> mix_window_nlls([window], [[0.0, 0.0]], [[torch.tensor([1.0, 1.0]), torch.tensor([3.0, 3.0])]], 3, 1.0)
        tensor([   nan, 1.5662, 1.5662], dtype=torch.float64)
    """
    nll = torch.full((num_tokens,), float("nan"), dtype=torch.float64)
    for w, found, window_rows in zip(windows, scores, rows):
        if found:
            log_weights = ensemble_log_weights(found, temperature)
            nll[w.score_begin : w.end] = mix_nlls(window_rows[: len(found)], log_weights)
        else:
            nll[w.score_begin : w.end] = window_rows[0]
    return nll
