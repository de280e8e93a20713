"""Drawing a figure's CSV rows (matplotlib, the ``[bench]`` extra): lines and bars per model, one panel per group of
rows. Every row of the CSV is drawn; a setting that differs between rows that would share a line or a bar (two
--max-eval-tokens, two indexes ...) is added to their label rather than mixed, and the settings common to all rows
go into the figure's caption.

    >>> rows = [{"model": "A", "stride": "4", "max_eval_tokens": "2048"}, {"model": "A", "stride": "8",
    ...          "max_eval_tokens": "1024"}, {"model": "A", "stride": "8", "max_eval_tokens": "2048"}]
    >>> split_columns(rows, ("model",), x="stride", candidates=("max_eval_tokens",))
    ['max_eval_tokens']
    >>> caption(rows, ("model", "max_eval_tokens"))
    'model=A'
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Callable, Iterable, Sequence

MODEL_COLORS = {"SmolLM2-135M": "#4c72b0", "Gemma-3-270M": "#dd8452"}
RETRIEVER_STYLES = {"bm25": "-", "dense": "--", "lucene": "-.", "hybrid": ":", "none": ":"}
SPLIT_STYLES = ("-", "--", "-.", ":")  # lines of one series that differ in another setting, in sorted order


def pyplot():
    """matplotlib's pyplot, drawing to files only (matplotlib is the ``bench`` extra: refused in one line without
    it)."""
    from hf_ralm.utils import require

    matplotlib = require("matplotlib", "bench", "Drawing the benchmarks' figures")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def split_columns(rows: Sequence[dict], group: Sequence[str], x: str | None, candidates: Iterable[str]) -> list[str]:
    """The ``candidates`` columns (but ``x``) whose value differs between two rows of the same ``group``: a line (or
    bar) must be split by them, and labelled with them, so that different settings are never mixed. An empty value
    (a setting the row does not use) differs from none."""
    def differs(column: str) -> bool:
        seen = defaultdict(set)
        for row in rows:
            seen[tuple(row[c] for c in group)].add(row[column])
        return any(len(values - {""}) > 1 for values in seen.values())

    return [c for c in candidates if c not in group and c != x and differs(c)]


def newest(rows: Sequence[dict], columns: Sequence[str]) -> list[dict]:
    """One row per value of ``columns``: the last measured (``measured_at``); says on stderr which rows it leaves out.

    Example:
        >>> newest([{"k": "a", "measured_at": "2026-01-02"}, {"k": "a", "measured_at": "2026-01-01"}], ["k"])
        [{'k': 'a', 'measured_at': '2026-01-02'}]
    """
    import sys

    kept: dict[tuple, dict] = {}
    for row in sorted(rows, key=lambda row: row["measured_at"]):
        key = tuple(row[c] for c in columns)
        if key in kept:
            print(f"[plot] {dict(zip(columns, key))}: drawing the row measured at {row['measured_at']}, not the one of "
                  f"{kept[key]['measured_at']} (other settings: delete the rows you do not want)", file=sys.stderr)
        kept[key] = row
    return list(kept.values())


def caption(rows: Sequence[dict], columns: Iterable[str]) -> str:
    """``name=value`` of the ``columns`` that hold one value over all ``rows`` (empty ones left out)."""
    common = [(c, {row[c] for row in rows}) for c in columns]
    return ", ".join(f"{c}={values.pop()}" for c, values in common if len(values) == 1 and "" not in values)


def label(row: dict, columns: Sequence[str]) -> str:
    return ", ".join(row[c] if i == 0 else f"{c}={row[c]}" for i, c in enumerate(columns))


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion, in [0, 1] (what a share of questions answered supports).

    Example:
        >>> [round(v, 4) for v in wilson_interval(7, 200)]
        [0.0171, 0.0705]
    """
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * ((p * (1 - p) / trials + z * z / (4 * trials * trials)) ** 0.5) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def draw_lines(ax, rows: Sequence[dict], x: str, y: str, series: Sequence[str], settings: Sequence[str],
               style: Callable[[dict], dict], scale: float = 1.0,
               interval: Callable[[dict], tuple[float, float]] | None = None) -> None:
    """One line per value of the ``series`` columns (split further by :func:`split_columns` over ``settings``), its
    points sorted by ``x``; ``style(row)`` gives the matplotlib keywords of a line. Where a series is split and
    ``style`` sets no linestyle, each split value gets its own dashes (:data:`SPLIT_STYLES`). ``interval(row)``, when
    given, is each point's ``(low, high)`` (in the units of ``y`` before ``scale``), drawn as an error bar."""
    columns = [*series, *split_columns(rows, series, x, settings)]
    lines = defaultdict(list)
    for row in rows:
        lines[tuple(row[c] for c in columns)].append(row)
    variants = sorted({key[len(series):] for key in lines})  # the values of the split settings, () if none
    for key, members in lines.items():
        members.sort(key=lambda row: float(row[x]))
        look = dict(style(members[0]))
        if len(variants) > 1 and "linestyle" not in look:  # a series split by another setting: its own dashes
            look["linestyle"] = SPLIT_STYLES[variants.index(key[len(series):]) % len(SPLIT_STYLES)]
        xs, ys = [float(row[x]) for row in members], [scale * float(row[y]) for row in members]
        line, = ax.plot(xs, ys, marker="o", markersize=3, label=label(members[0], columns), **look)
        if interval is not None:
            error_bars(ax, xs, ys, [interval(row) for row in members], line.get_color(), scale)


def error_bars(ax, xs: Sequence[float], ys: Sequence[float], bounds: Sequence[tuple[float, float] | None],
               color: str, scale: float = 1.0) -> None:
    """An error bar from ``low`` to ``high`` (times ``scale``) at each point whose bounds are not None (a point
    without an interval is drawn without a bar). A bound on the wrong side of its point is drawn at the point: an
    interval of no width, recomputed on another scale, can land a rounding error beyond it."""
    have = [(x, y, b) for x, y, b in zip(xs, ys, bounds) if b is not None]
    if have:
        ax.errorbar([x for x, _, _ in have], [y for _, y, _ in have],
                    yerr=[[max(0.0, y - scale * low) for _, y, (low, _) in have],
                          [max(0.0, scale * high - y) for _, y, (_, high) in have]],
                    fmt="none", ecolor=color, elinewidth=0.8, capsize=2, alpha=0.7)


def draw_baselines(ax, rows: Sequence[dict], y: str, series: Sequence[str], settings: Sequence[str],
                   style: Callable[[dict], dict],
                   interval: Callable[[dict], tuple[float, float] | None] | None = None) -> None:
    """A horizontal dotted line per row (rows without an x, such as the runs without retrieval), with ``interval(row)``
    as a light band where it is given and not None."""
    columns = [*series, *split_columns(rows, series, None, settings)]
    for row in rows:
        look = {k: v for k, v in style(row).items() if k != "linestyle"}
        line = ax.axhline(float(row[y]), linestyle=":", linewidth=1.2, label=label(row, columns) + " (no retrieval)",
                          **look)
        band = interval(row) if interval is not None else None
        if band is not None:
            ax.axhspan(*band, color=line.get_color(), alpha=0.12, linewidth=0)


def model_color(row: dict) -> dict:
    """A colour per model."""
    return {"color": MODEL_COLORS.get(row["model"], "#555555")}


def model_style(row: dict) -> dict:
    """A colour per model and a line style per retriever."""
    return {**model_color(row), "linestyle": RETRIEVER_STYLES.get(row["retriever"], "-")}


def log2_axis(ax, values: Iterable[float]) -> None:
    """A log-2 x axis ticked at ``values``."""
    ticks = sorted(set(values))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()


def log_y(ax) -> None:
    """A log y axis with plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def panels(num: int, rows: int = 1, width: float = 4.6, height: float = 3.6):
    """``(figure, axes)``: ``rows`` x ``num`` panels, ``axes[r][c]``."""
    plt = pyplot()
    fig, axes = plt.subplots(rows, num, figsize=(width * num, height * rows), squeeze=False)
    return fig, axes


def mark_cut_axes(fig) -> None:
    """Every linear y axis of ``fig`` that does not start at zero gets a break mark (two short slanted strokes) at
    its foot, so that a reader sees the axis is cut and that differences look larger than they are."""
    for ax in fig.axes:
        low, high = ax.get_ylim()
        if ax.get_yscale() != "linear" or low <= 0 or high <= low:
            continue
        side = 1.0 if ax.yaxis.get_label_position() == "right" else 0.0
        for dy in (0.0, 0.025):
            ax.plot([side - 0.015, side + 0.015], [0.01 + dy, 0.035 + dy], transform=ax.transAxes, color="k",
                    linewidth=0.9, clip_on=False)


def save(fig, path: str, rows: Sequence[dict], settings: Sequence[str]) -> None:
    """Caption the figure with the settings common to all rows, mark the cut axes (:func:`mark_cut_axes`) and write
    it to ``path`` (PNG)."""
    import textwrap

    mark_cut_axes(fig)

    text = textwrap.fill(caption(rows, settings), int(12 * fig.get_figwidth()))  # ~12 characters an inch at 9 pt
    fig.suptitle(text, fontsize=9, y=0.995)
    lines = text.count("\n") + 1
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.16 * lines + 0.1) / fig.get_figheight()))  # 9 pt lines, in inches
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=130)
    pyplot().close(fig)
