"""The perplexity point every perplexity figure is made of: one In-Context RALM evaluation of a reader on one text
with one setting of (L, s, ℓ, retriever), and its CSV columns.

By default a point evaluates the first ``max_eval_tokens`` tokens of the text, as the perplexity tables do (window 0
included, without retrieval). With ``context_tokens`` C > 0 it scores the ``max_eval_tokens`` tokens that follow
the first C instead, each window with a full ``max_length`` L of text before it (:func:`eval_slice`): points that
vary L then score exactly the same tokens, and no point's figure is diluted by a first window without retrieval
(C must be at least the largest L).

Every point keeps the NLL of each token it counts in ``<name>.tokens.jsonl`` beside the CSV, and its CSV row the 95%
interval of its token perplexity (``token_ppl_low``, ``token_ppl_high``; :mod:`intervals`: a block bootstrap over
the point's tokens); a change against no retrieval gets its paired interval from the two points' token NLLs
(:func:`changes`). ``--fill-intervals`` measures again the points of an older CSV that has no interval, and fills it
in without touching what the row measured (the wall times of that first run stay the figure's).

    >>> eval_slice(context_tokens=0, max_length=512, num_tokens=2048)
    (0, 2048, 0)
    >>> eval_slice(context_tokens=2048, max_length=512, num_tokens=1024)
    (1536, 3072, 512)
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

from benchmarks.figures import intervals, sweep
from benchmarks.tables.results_csv import REFILL_RTOL, REMEASURE_RTOL, fill_in
from benchmarks.bench_setup import READERS
from benchmarks.figures.resources import WHOLE, Resources

SETTINGS = ("model", "data", "dtype", "bos_every_window", "max_eval_tokens", "context_tokens", "max_length", "stride",
            "query_length", "max_doc_tokens", "retriever", "corpus", "index_id")
MEASURES = ("token_ppl", "token_ppl_low", "token_ppl_high", "word_ppl", "nll_sum", "num_tokens", "num_words",
            "num_windows", "num_retrievals",
            "num_windows_with_passage", "wall_s", "retrieval_s", "scoring_s", "device", "threads", "measured_at")
INTERVAL = ("token_ppl_low", "token_ppl_high")  # added after the first CSVs were measured: empty in their rows
RETRIEVAL_ONLY = ("query_length", "max_doc_tokens", "corpus")  # settings a run without retrieval has not (None)
# the settings that fix which tokens a point counts: points equal in these are paired token by token
SAME_TOKENS = ("model", "data", "dtype", "bos_every_window", "max_eval_tokens", "context_tokens", "max_length")
MAX_LENGTH = 512  # L of every figure that does not vary it (the tables')


def table(path: str) -> sweep.Table:
    """A perplexity figure's CSV (``<out-dir>/<name>.csv``)."""
    return sweep.Table(path, SETTINGS, MEASURES, optional=INTERVAL)


def records(csv_path: str) -> intervals.TokenRecords:
    """The token NLLs of the points of the CSV at ``csv_path`` (``<name>.tokens.jsonl`` beside it)."""
    return intervals.TokenRecords(csv_path.removesuffix(".csv") + ".tokens.jsonl", SETTINGS)


def main(doc: str, name: str, index_kinds: list[str], add_flags, points, plot, argv=None) -> list[dict]:
    """A perplexity figure script's run (:func:`sweep.main`): the common flags, the index flags of ``index_kinds``,
    the script's own (``add_flags(parser)``), then ``points(resources)`` measured into ``<out-dir>/<name>.csv`` (and
    their token NLLs beside it) and ``plot(rows, png)``; then the changes against no retrieval with their intervals
    are printed."""
    parser = sweep.parser(doc)
    sweep.add_index_flags(parser, index_kinds)
    add_flags(parser)
    parser.add_argument("--fill-intervals", action="store_true",
                        help="measure again the points whose row has no interval (an older CSV) and fill it in")
    args = parser.parse_args(argv)
    res = Resources(args)
    path = os.path.join(args.out_dir, f"{name}.csv")
    tbl, kept = table(path), records(path)
    redo = (lambda row: not intervals.bounds(row)) if args.fill_intervals else None
    rows = sweep.main(args, tbl, lambda: points(res), keeping(res, tbl, kept, refill=args.fill_intervals), plot, name,
                      redo=redo)
    for row in changes(rows, kept):
        print(describe(row), file=sys.stderr)
    return rows


def keeping(res: Resources, tbl: sweep.Table, kept: intervals.TokenRecords,
            refill: bool = False) -> Callable[[dict], dict]:
    """:func:`measure` for :func:`sweep.run_points`: the point's row, its token NLLs kept in ``kept``.

    With ``refill`` (``--fill-intervals``), a point that has a row without an interval keeps that row's figures and
    times and takes only the interval, once its NLL sum is found again (``REFILL_RTOL``); a bfloat16 row whose NLL sum
    is found again only within ``REMEASURE_RTOL`` (bfloat16's arithmetic order) is measured anew. The row may name its
    index by an id that an older version of the index metadata gave (``index_id`` hashes that metadata): a row that
    differs from the point in ``index_id`` alone is taken for it, and the NLL sum, which the passages retrieved
    decide, is what shows it is the same retrieval; the row then carries the index's current id.

    Raises:
        ValueError: a point measured again does not reproduce its row's NLL sum.
    """
    def earlier(point: dict) -> dict | None:
        exact = tbl.row(point)
        if exact is not None or not refill:
            return exact

        def loose(row: dict) -> tuple:
            return tbl.key({**row, "index_id": None})

        return next((row for row in tbl.read() if intervals.bounds(row) is None and loose(row) == loose(point)), None)

    def measure_and_keep(p: dict) -> dict:
        row = measure(res, p)
        nlls = row.pop("token_nlls")
        old = earlier({**p, **row})
        if old is not None:
            anew_within = REMEASURE_RTOL if old.get("dtype") == "bfloat16" else None  # float32 paths agree to 1e-6
            filled = fill_in(old, row, ("index_id", *INTERVAL), "nll_sum", REFILL_RTOL, anew_within)
            if tbl.key(old) != tbl.key(filled):  # the old row, re-keyed, then replaced by its filled-in self
                tbl.put({**old, "index_id": row["index_id"]}, replacing=old)
            row = filled
        kept.put({**p, **row}, nlls)
        return row

    return measure_and_keep


def eval_slice(context_tokens: int, max_length: int, num_tokens: int) -> tuple[int, int, int]:
    """``(start, end, first)``: evaluate the token ids ``[start, end)`` and count the scored tokens from position
    ``first`` of that slice on, so that the counted tokens are ``[context_tokens, context_tokens + num_tokens)`` of
    the text, each window holding ``max_length`` tokens of text (``context_tokens`` 0: the first ``num_tokens``,
    all of them counted)."""
    if context_tokens == 0:
        return 0, num_tokens, 0
    if context_tokens < max_length:
        raise ValueError(f"context_tokens ({context_tokens}) must be at least max_length ({max_length}) so that every "
                         "counted token has a full window of text before it.")
    return context_tokens - max_length, context_tokens + num_tokens, max_length


def point(res: Resources, model: str, data: str, retriever: str = "bm25", corpus: str | None = WHOLE,
          **settings) -> dict:
    """A point's settings: the tables' (L=512, s=4, ℓ=32 for BM25 / 64 for dense and hybrid, 256-token passages,
    the first --max-eval-tokens tokens, the model's dtype and BOS rule, the whole sample) with ``settings`` changed.
    Settings that a run without retrieval does not use are ``None``."""
    from hf_ralm import RalmConfig, default_query_length

    defaults = RalmConfig()
    p = {"model": model, "data": data, "dtype": res.dtype(model), "bos_every_window": READERS[model].bos_every_window,
         "max_eval_tokens": res.args.max_eval_tokens, "context_tokens": 0, "max_length": MAX_LENGTH,
         "stride": defaults.retrieval_stride, "query_length": default_query_length(retriever),
         "max_doc_tokens": defaults.max_doc_tokens, "retriever": retriever, "corpus": corpus, **settings}
    if retriever == "none":
        p.update(dict.fromkeys(RETRIEVAL_ONLY))
    p["index_id"] = res.index_id(retriever, p["corpus"])
    return p


def points_per_text(res: Resources, variants: list[dict], baseline: bool = True) -> list[dict]:
    """Model by model (so that each loads once), for every evaluation text: the run without retrieval (with
    ``baseline``), then a :func:`point` per variant (the settings it changes)."""
    out = []
    for model in res.args.models:
        for data in res.args.datasets:
            out += [point(res, model, data, retriever="none")] if baseline else []
            out += [point(res, model, data, **variant) for variant in variants]
    return out


def measure(res: Resources, p: dict) -> dict:
    """Evaluate the point: its figures (over the counted tokens, :func:`eval_slice`) with the interval of its token
    perplexity, counts and times, and ``token_nlls``, the NLL of every counted token (a numpy array)."""
    from hf_ralm import RalmConfig, count_words, evaluate_perplexity, perplexity_figures

    model, tokenizer = res.reader(p["model"], p["dtype"])
    ids = res.ids(p["model"], p["dtype"], p["data"])
    start, end, first = eval_slice(p["context_tokens"], p["max_length"], p["max_eval_tokens"])
    if len(ids) < end:
        raise ValueError(f"{p['data']} has {len(ids)} tokens, fewer than the {end} this point needs: lower "
                         "--max-eval-tokens.")
    ids = ids[start:end]
    # without retrieval there is no passage: any max_doc_tokens the window has room for will do
    doc_tokens = p["max_doc_tokens"] or p["max_length"] - p["stride"]
    config = RalmConfig(retrieval_stride=p["stride"], query_length=p["query_length"], max_length=p["max_length"],
                        max_doc_tokens=doc_tokens, bos_every_window=p["bos_every_window"])
    retriever = res.retriever(p["retriever"], p["corpus"], p["data"])
    t0 = time.perf_counter()
    result = evaluate_perplexity(model, tokenizer, ids, retriever, config, batch_size=res.args.batch_size,
                                 show_progress=sys.stderr.isatty())
    wall = time.perf_counter() - t0
    counted = max(first, 1)  # token 0 is never scored
    nlls = result.token_nlls[counted:].double().cpu().numpy()
    figures = perplexity_figures(float(nlls.sum()), len(ids) - first, len(ids) - counted,
                                 count_words(tokenizer.decode(ids[first:])))
    figures["token_ppl_low"], figures["token_ppl_high"] = intervals.ppl_interval(
        nlls, unscored=figures["num_tokens"] - len(nlls))
    counts = {k: result.figures[k] for k in ("num_windows", "num_retrievals", "num_windows_with_passage")}
    return {**figures, "token_nlls": nlls, **counts,
            "wall_s": wall, "retrieval_s": result.timings["retrieval_s"], "scoring_s": result.timings["scoring_s"],
            "index_id": res.index_id(p["retriever"], p["corpus"]),  # an index built by this point has its id now
            **sweep.provenance(model)}


def same_tokens(row: dict) -> tuple:
    """What fixes the tokens a row counts (:data:`SAME_TOKENS`): rows equal in it are paired token by token."""
    return tuple(row[column] for column in SAME_TOKENS)


def changes(rows: list[dict], kept: intervals.TokenRecords | None = None) -> list[dict]:
    """Per row with retrieval that has a row without retrieval over the same tokens (:func:`same_tokens`): the row
    with ``change`` = 100 * (ppl with / ppl without - 1), in percent, and ``change_low``, ``change_high``, its 95%
    paired interval from the two points' token NLLs in ``kept`` (empty strings where either has none kept).

    Example:
        >>> base = dict.fromkeys(SAME_TOKENS, "x")
        >>> rows = [{**base, "retriever": "none", "token_ppl": "20.0"},
        ...         {**base, "retriever": "bm25", "token_ppl": "19.0"}]
        >>> [(row["change"], row["change_low"]) for row in changes(rows)]
        [('-5', '')]
    """
    without = {same_tokens(row): row for row in rows if row["retriever"] == "none"}
    out = []
    for row in rows:
        base = without.get(same_tokens(row))
        if row["retriever"] == "none" or base is None:
            continue
        low = high = ""
        if kept is not None:
            nlls, base_nlls = kept.get(row), kept.get(base)
            if nlls is not None and base_nlls is not None:
                bounds = intervals.change_interval(nlls, base_nlls, fixed=first_window(row),
                                                   unscored=int(row["num_tokens"]) - len(nlls))
                low, high = (f"{value:.6g}" for value in bounds)
        change = 100 * (float(row["token_ppl"]) / float(base["token_ppl"]) - 1)
        out.append({**row, "change": f"{change:.6g}", "change_low": low, "change_high": high})
    return out


def first_window(row: dict) -> int:
    """How many of a row's counted tokens its first window scores (without retrieval at every setting): the first
    L - 1 when the row counts from the start of the text, none when it counts after ``context_tokens`` of context."""
    return int(row["max_length"]) - 1 if int(row["context_tokens"] or 0) == 0 else 0


def draw_changes(ax, rows: list[dict], x: str, kept: intervals.TokenRecords, series, settings, style) -> None:
    """Retrieval's paired change against no retrieval (:func:`changes`), with its interval, against ``x``: a point's
    absolute perplexity moves with the text far more than with the setting, so this is the panel that tells the
    settings apart."""
    from benchmarks.figures import plotting

    plotting.draw_lines(ax, changes(rows, kept), x, "change", series, settings, style,
                        interval=lambda row: intervals.bounds(row, "change_low", "change_high"))
    ax.axhline(0, color="#999999", linewidth=0.8)
    ax.set_ylabel("change against no retrieval (%)")


def describe(row: dict) -> str:
    """One line of :func:`changes`' output: the point's settings that vary in a figure, its perplexity with its
    interval, and its change against no retrieval with its interval."""
    shown = ("model", "data", "max_length", "stride", "query_length", "retriever", "corpus")
    where = ", ".join(f"{column}={row[column]}" for column in shown if row.get(column))
    ppl = f"{float(row['token_ppl']):.3f}"
    if intervals.bounds(row):
        ppl += " ({:.3f}-{:.3f})".format(*intervals.bounds(row))
    change = f"{float(row['change']):+.1f}%"
    if row["change_low"]:
        change += f" ({float(row['change_low']):+.1f}..{float(row['change_high']):+.1f})"
    return f"{where}: token ppl {ppl}, against none {change}"
