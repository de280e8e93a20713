"""95% intervals for the perplexity figures' points, from the token NLLs each point keeps beside its CSV.

A point is one slice of one text (the first 1,024 tokens of one article, say), so there are no articles to resample
as in the whole-set runs (benchmarks/tables/scale_tables.py). The interval resamples the point's own scored tokens
instead, in contiguous blocks of :data:`BLOCK_TOKENS`: the NLLs of neighbouring tokens are not independent (the same
sentence, and the same retrieved passage for the consecutive windows of s=4 that retrieve it), and resampling single
tokens would understate the spread. 32 tokens is 8 windows at s=4, longer than a passage usually stays in context.
It is a block bootstrap (:data:`DRAWS` resamples of the blocks with replacement, seed 0, percentile intervals): it
says how sure a figure is for THIS slice, not how far another article would move it, and with few blocks (8 for a
256-token point) it is rough and too narrow rather than too wide.

A change against no retrieval is paired: both points score the same tokens (:func:`same_tokens`), so each resample
takes the same blocks of both, and the interval is that of the ratio of their perplexities.

    >>> import numpy as np
    >>> nlls = np.full(64, 2.0)
    >>> low, high = ppl_interval(nlls)
    >>> round(low, 4) == round(high, 4) == round(float(np.exp(2.0)), 4)
    True
    >>> [round(v, 3) for v in change_interval(nlls + 0.1, nlls)]  # +0.1 nats a token: +10.5% perplexity
    [10.517, 10.517]
"""

from __future__ import annotations

import base64
import json
import os
from typing import Mapping, Sequence

import numpy as np

BLOCK_TOKENS = 32
BLOCK_WINDOWS = 8  # where the units are windows (sums of their s tokens): 32 tokens at s=4, as BLOCK_TOKENS
DRAWS = 2000


def _token_counts(counts: np.ndarray | None, num_units: int) -> np.ndarray:
    """Each unit's tokens: a unit is a token, or with ``counts`` a group of ``counts[i]`` tokens (a window)."""
    return np.ones(num_units) if counts is None else np.asarray(counts, dtype=np.float64)


def _block_sums(nlls: np.ndarray, block: int, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per contiguous block of ``block`` units (the last one may be shorter): its NLL sum and its token count."""
    starts = np.arange(0, len(nlls), block)
    return np.add.reduceat(nlls, starts), np.add.reduceat(counts, starts)


def _draws(num_blocks: int, draws: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, num_blocks, size=(draws, num_blocks))


def _percentiles(samples: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(samples, [2.5, 97.5])
    return float(low), float(high)


def ppl_interval(nlls: np.ndarray, block: int = BLOCK_TOKENS, draws: int = DRAWS, seed: int = 0,
                 counts: np.ndarray | None = None, unscored: int = 0) -> tuple[float, float]:
    """The 95% block-bootstrap interval of the token perplexity of ``nlls`` (one NLL per scored token, or per unit
    of ``counts`` tokens). ``unscored`` tokens count in every resample's denominator without an NLL: the paper's
    perplexity divides by the whole text's tokens, token 0 (never scored) included."""
    nlls = np.asarray(nlls, dtype=np.float64)
    sums, counts = _block_sums(nlls, block, _token_counts(counts, len(nlls)))
    picked = _draws(len(sums), draws, seed)
    return _percentiles(np.exp(sums[picked].sum(1) / (unscored + counts[picked].sum(1))))


def change_interval(nlls: np.ndarray, base_nlls: np.ndarray, block: int = BLOCK_TOKENS, draws: int = DRAWS,
                    seed: int = 0, counts: np.ndarray | None = None, fixed: int = 0,
                    unscored: int = 0) -> tuple[float, float]:
    """The 95% paired block-bootstrap interval of ``100 * (ppl(nlls) / ppl(base_nlls) - 1)``, in percent: the same
    tokens (or units of ``counts`` tokens) scored two ways, the same blocks drawn for both. The first ``fixed`` units
    are counted once in every resample instead of drawn: the first window, scored without retrieval whatever the
    setting, is part of every evaluation by design, not a sample of the text, and drawing its hundreds of tokens
    (as one unit, or as blocks whose difference is zero) would add a spread that no setting has. ``unscored``: as for
    :func:`ppl_interval`.

    Raises:
        ValueError: the two do not score the same number of tokens.
    """
    nlls, base_nlls = np.asarray(nlls, dtype=np.float64), np.asarray(base_nlls, dtype=np.float64)
    if nlls.shape != base_nlls.shape:
        raise ValueError(f"A paired interval needs the same tokens scored both ways, got {len(nlls)} and "
                         f"{len(base_nlls)} token NLLs.")
    counts = _token_counts(counts, len(nlls))
    diff = nlls - base_nlls
    kept_sum, kept_count = diff[:fixed].sum(), unscored + counts[:fixed].sum()
    sums, counts = _block_sums(diff[fixed:], block, counts[fixed:])
    picked = _draws(len(sums), draws, seed)
    return _percentiles(100 * np.expm1((kept_sum + sums[picked].sum(1)) / (kept_count + counts[picked].sum(1))))


class TokenRecords:
    """The token NLLs of a figure's points, one JSON line per point (its key, the values of its ``settings`` as in
    the CSV, and the NLLs as little-endian float32, base64), in ``path`` (``<name>.tokens.jsonl`` beside the CSV).
    The file is written again, atomically, with every point, as the CSV is.

    Example:
        >>> import tempfile
        >>> records = TokenRecords(os.path.join(tempfile.mkdtemp(), "fig.tokens.jsonl"), ("model", "stride"))
        >>> records.put({"model": "SmolLM2-135M", "stride": 4}, np.array([1.5, 2.5]))
        >>> records.get({"model": "SmolLM2-135M", "stride": "4"}).tolist()
        [1.5, 2.5]
        >>> records.get({"model": "SmolLM2-135M", "stride": "8"}) is None
        True
    """

    def __init__(self, path: str | os.PathLike, settings: Sequence[str]):
        self.path, self.settings = os.fspath(path), tuple(settings)

    def _read(self) -> dict[tuple[str, ...], str]:
        if not os.path.isfile(self.path):
            return {}
        with open(self.path, encoding="utf-8") as f:
            lines = [json.loads(line) for line in f if line.strip()]
        return {tuple(line["key"]): line["nlls"] for line in lines}

    def get(self, point: Mapping) -> np.ndarray | None:
        """The point's token NLLs, or None when it has none kept (measured before the records existed)."""
        from benchmarks.tables.results_csv import point_key

        encoded = self._read().get(point_key(self.settings, point))
        return None if encoded is None else np.frombuffer(base64.b64decode(encoded), dtype="<f4").astype(np.float64)

    def put(self, point: Mapping, nlls: np.ndarray) -> None:
        """Keep the point's token NLLs (in place of any kept before)."""
        from benchmarks.tables.results_csv import point_key
        from hf_ralm.utils import write_text_atomic

        kept = self._read()
        encoded = base64.b64encode(np.asarray(nlls, dtype="<f4").tobytes()).decode("ascii")
        kept[point_key(self.settings, point)] = encoded
        text = "".join(json.dumps({"key": list(k), "nlls": v}) + "\n" for k, v in kept.items())
        write_text_atomic(self.path, text, suffix=".jsonl")


def bounds(row: Mapping[str, str], low: str = "token_ppl_low",
           high: str = "token_ppl_high") -> tuple[float, float] | None:
    """A CSV row's interval, or None where its cells are empty (a point measured before intervals were kept)."""
    return (float(row[low]), float(row[high])) if row.get(low) and row.get(high) else None
