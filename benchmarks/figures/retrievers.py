"""The paper's Figure 3 on our data: perplexity with no retrieval, bm25s (``bm25``), Lucene, dense (all-MiniLM-L6-v2,
mean pooling, exact inner product) and hybrid (RRF of bm25s and dense) retrieval, each at its best query length ℓ
from query_length.py's CSV, over the WHOLE Wikipedia sample (upper panels) and over the 1,000-article subset of
benchmarks/speed/bench_retrievers.py (lower panels); L=512, s=4, both models (Gemma with a BOS in every window),
held-out Wikipedia and WikiText-103 test, the first --max-eval-tokens tokens. The paper: BM25 is the best retriever.

Query lengths: Lucene takes BM25's best ℓ and hybrid dense's, for the same model, data and --max-eval-tokens; where
query_length.csv has no such points, the paper's defaults (32 sparse, 64 dense and hybrid); --query-length KIND=ℓ
sets one. The CSV records the ℓ of every point.

The whole sample's Lucene index (--lucene-index-dir) is built on first use if missing (~1.5 min), and so is its dense
index (--dense-index-dir): encoding ~666k passages with MiniLM in bfloat16 takes about 3 hours on a 2-core CPU; an
interrupted build resumes where it stopped. The subset and its indexes are those of bench_retrievers.py
(--subset-out), built if missing (minutes).

    python benchmarks/figures/query_length.py                      # first, for the best ℓ
    python benchmarks/figures/retrievers.py                        # docs/figures/retrievers.{csv,png}; resumable
    python benchmarks/figures/retrievers.py --corpora subset       # the subset panels only
"""

from __future__ import annotations

import os
import sys

from benchmarks.figures import intervals, perplexity
from benchmarks.figures import plotting
from benchmarks.figures.query_length import best_query_lengths
from benchmarks.figures.resources import RETRIEVERS, WHOLE, Resources, add_subset_flags

NAME = "retrievers"
LENGTH_FROM = {"bm25": "bm25", "lucene": "bm25", "dense": "dense", "hybrid": "dense"}  # whose best ℓ each takes


def query_length(given: dict, best: dict, model: str, data: str, kind: str, max_eval_tokens: int) -> int:
    """The ℓ of a point: ``given[kind]`` (--query-length KIND=ℓ), else the best of query_length.csv for
    ``LENGTH_FROM[kind]`` (:func:`query_length.best_query_lengths`), else the paper's default."""
    from hf_ralm import default_query_length

    if kind in given:
        return given[kind]
    return best.get((model, data, LENGTH_FROM[kind], str(max_eval_tokens)), default_query_length(kind))


def points(res: Resources) -> list[dict]:
    args = res.args
    lengths = dict(args.query_length)
    source = args.query_lengths_from or os.path.join(args.out_dir, "query_length.csv")
    best = best_query_lengths(perplexity.table(source).read())
    print(f"[{NAME}] best query lengths from {source}: {best or 'none found (defaults)'}", file=sys.stderr)
    corpora = [WHOLE if corpus == "whole" else res.subset() for corpus in args.corpora]
    out = []
    for model in args.models:
        for corpus in corpora:
            for data in args.datasets:
                for kind in args.retrievers:
                    if kind == "none":
                        if corpus == corpora[0]:  # one run without retrieval per model and data
                            out.append(perplexity.point(res, model, data, retriever="none"))
                        continue
                    out.append(perplexity.point(res, model, data, retriever=kind, corpus=corpus,
                                                query_length=query_length(lengths, best, model, data, kind,
                                                                          args.max_eval_tokens)))
    return out


def plot(rows: list[dict], path: str) -> None:
    corpora = sorted({row["corpus"] for row in rows if row["corpus"]}, key=lambda c: c != WHOLE)
    datasets = sorted({row["data"] for row in rows})
    fig, axes = plotting.panels(len(datasets), rows=len(corpora), width=5.2)
    settings = perplexity.SETTINGS
    # a bar per model, split by any other setting that differs; the query length and the index are the retriever's
    # own (query_length.csv and the index on disk at the time), so only the newest row of a bar is drawn
    bar_of = ("model", "dtype", *plotting.split_columns(rows, ("model", "dtype", "data", "retriever", "corpus"), None,
                                                        [s for s in settings if s not in ("query_length", "index_id")]))
    rows = plotting.newest(rows, ("data", "retriever", "corpus", *bar_of))
    for r, corpus in enumerate(corpora):
        for c, data in enumerate(datasets):
            ax = axes[r][c]
            here = [row for row in rows if row["data"] == data and row["corpus"] in (corpus, "")]
            kinds = [kind for kind in RETRIEVERS if any(row["retriever"] == kind for row in here)]
            bars = sorted({tuple(row[col] for col in bar_of) for row in here})
            width = 0.8 / max(len(bars), 1)
            for b, bar in enumerate(bars):
                mine = {row["retriever"]: row for row in here if tuple(row[col] for col in bar_of) == bar}
                xs = [k + (b - (len(bars) - 1) / 2) * width for k in range(len(kinds))]
                ys = [float(mine[kind]["token_ppl"]) if kind in mine else float("nan") for kind in kinds]
                color = plotting.MODEL_COLORS.get(bar[0], "#555555")
                drawn = ax.bar(xs, ys, width, color=color, label=plotting.label(dict(zip(bar_of, bar)), bar_of))
                ax.bar_label(drawn, fmt="%.2f", fontsize=6, padding=6)
                plotting.error_bars(ax, xs, ys, [intervals.bounds(mine[kind]) if kind in mine else None
                                                 for kind in kinds], "#333333")
            ax.set_xticks(range(len(kinds)), [tick(kind, here) for kind in kinds], fontsize=7)
            low = min(float(row["token_ppl_low"] or row["token_ppl"]) for row in here)
            high = max(float(row["token_ppl_high"] or row["token_ppl"]) for row in here)
            ax.set_ylim(low * 0.95, high * 1.06)  # room for the bars' labels and the legend; the cut is marked
            ax.set_ylabel("token perplexity")
            ax.set_title(f"{data}, retrieval from the {corpus}", fontsize=9)
            ax.legend(fontsize=6, loc="best")
    plotting.save(fig, path, rows, settings)


def tick(kind: str, rows: list[dict]) -> str:
    """A retriever's tick label, with the ℓ of its bars."""
    lengths = sorted({int(row["query_length"]) for row in rows if row["retriever"] == kind and row["query_length"]})
    return kind + ("\nℓ=" + "/".join(map(str, lengths)) if lengths else "")


def kind_and_length(value: str) -> tuple[str, int]:
    """--query-length's ``KIND=ℓ``.

    Example:
        >>> kind_and_length("dense=128")
        ('dense', 128)
    """
    import argparse

    kind, _, ell = value.partition("=")
    if kind not in LENGTH_FROM or not ell.isdigit() or int(ell) < 1:
        raise argparse.ArgumentTypeError(f"takes KIND=ℓ with KIND one of {', '.join(LENGTH_FROM)} and ℓ a positive "
                                         f"integer, got {value!r}")
    return kind, int(ell)


def main(argv=None) -> list[dict]:
    def flags(parser):
        add_subset_flags(parser)
        parser.add_argument("--retrievers", nargs="+", choices=RETRIEVERS, default=list(RETRIEVERS))
        parser.add_argument("--corpora", nargs="+", choices=["whole", "subset"], default=["whole", "subset"])
        parser.add_argument("--query-lengths-from", help="query_length.py's CSV (default OUT_DIR/query_length.csv)")
        parser.add_argument("--query-length", action="append", default=[], metavar="KIND=ℓ", type=kind_and_length,
                            help="a retriever's ℓ, instead of the best of --query-lengths-from (may repeat)")

    return perplexity.main(__doc__, NAME, ["bm25", "lucene", "dense"], flags, points, plot, argv)


if __name__ == "__main__":
    main()
