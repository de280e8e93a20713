"""The fast, exact scorer: negative log-likelihoods of every scored token of every window.

Each window's input is ``prefix_ids`` (a passage, a BOS, or nothing) written over the first positions of the
window's tokens, exactly as the reference does; what changes is how it is computed:

* windows of equal shape are batched (every window is exactly ``end - begin`` long, so no padding is needed);
* logits are computed only at the positions that score a token (``logits_to_keep``), not for the whole window;
* windows that share the same passage share its keys/values: a passage sits at position 0 and attention is causal,
  so its keys/values do not depend on the text after it. They come from a
  :class:`~hf_ralm.passage_cache.PassageKVCache` (computed once per distinct passage, or taken from a store the
  caller shares, e.g. with generation) and only the text after the passage is run (turn off with
  ``reuse_prefix_kv=False``).

Example:
    >>> nll = score_windows(model, ids, plan_windows(len(ids), 512, 4), prefixes)   # doctest: +SKIP
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch
from tqdm.auto import tqdm

from .modeling_utils import last_logits, model_device
from .passage_cache import PassageKVCache
from .windows import Window, place_passage


def token_nlls(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``-log p(target)`` per position, with the softmax in float32 whatever the model's dtype."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def _splits_at_prefix(window: Window, prefix_len: int) -> bool:
    """Whether every position that scores a token lies after the prefix, so the prefix's keys/values can be reused."""
    return 0 < prefix_len <= window.score_begin - 1 - window.begin


def _group_windows(
    windows: Sequence[Window], prefixes: Sequence[Sequence[int]], reuse_prefix_kv: bool
) -> dict[tuple, list[Window]]:
    """Windows that can run in one batch: same length, same number of scored tokens, and, when the prefix's
    keys/values are reused, the same prefix."""
    groups: dict[tuple, list[Window]] = defaultdict(list)
    for w in windows:
        prefix = tuple(prefixes[w.index][: w.length])
        shared = prefix if reuse_prefix_kv and _splits_at_prefix(w, len(prefix)) else None
        groups[(shared, w.length, w.num_scored)].append(w)
    return groups


@torch.inference_mode()
def score_windows(
    model,
    ids: Sequence[int],
    windows: Sequence[Window],
    prefixes: Sequence[Sequence[int]],
    batch_size: int = 8,
    reuse_prefix_kv: bool = True,
    show_progress: bool = True,
    passage_cache: PassageKVCache | None = None,
) -> torch.Tensor:
    """NLL of every token, as a float64 tensor of ``len(ids)`` (NaN where no window scores the token, i.e. token 0).

    ``prefixes[w.index]`` is what overwrites the start of window ``w`` (a passage's token ids, ``[bos]`` or ``[]``).
    ``passage_cache``: a :class:`~hf_ralm.passage_cache.PassageKVCache` of ``model`` to take the passages'
    keys/values from and keep them in (by default a store of this call's own).
    """
    if passage_cache is not None and not reuse_prefix_kv:
        raise ValueError("passage_cache holds passages' keys/values for reuse: it needs reuse_prefix_kv=True.")
    if reuse_prefix_kv:
        passage_cache = PassageKVCache.for_model(model, passage_cache)
    device = model_device(model)
    all_ids = torch.as_tensor(list(ids), dtype=torch.long)
    nll = torch.full((len(all_ids),), float("nan"), dtype=torch.float64)
    groups = _group_windows(windows, prefixes, reuse_prefix_kv)
    progress = tqdm(total=len(windows), desc="Scoring windows", unit="win", disable=not show_progress)
    for (shared_prefix, length, num_scored), members in sorted(groups.items(), key=lambda g: g[1][0].index):
        for start in range(0, len(members), batch_size):
            batch = members[start : start + batch_size]
            targets = torch.stack([all_ids[w.score_begin : w.end] for w in batch]).to(device)
            if shared_prefix is None:
                inputs = [place_passage(all_ids[w.begin : w.end].tolist(), prefixes[w.index]) for w in batch]
                logits = last_logits(model, torch.tensor(inputs, device=device), num_scored + 1)
            else:
                cache, _ = passage_cache.get(shared_prefix)  # a private copy, one row: repeated for the batch
                cache.batch_repeat_interleave(len(batch))
                skip = len(shared_prefix)
                suffix = torch.stack([all_ids[w.begin + skip : w.end] for w in batch]).to(device)
                logits = last_logits(model, suffix, num_scored + 1, past_key_values=cache)
            batch_nll = token_nlls(logits[:, :-1], targets).double().cpu()
            for w, row in zip(batch, batch_nll):
                nll[w.score_begin : w.end] = row
            progress.update(len(batch))
    progress.close()
    return nll
