"""The paper's Figures 6, 9 and 10 on our data: perplexity against the query length ℓ ∈ {8, 16, 32, 64, 128} (the
last ℓ tokens before a window's first scored token), for BM25 (bm25s) and for dense retrieval (all-MiniLM-L6-v2,
mean pooling), both over the whole Wikipedia sample; L=512, s=4, both models (Gemma with a BOS in every window),
held-out Wikipedia and WikiText-103 test, the first --max-eval-tokens tokens; each model's perplexity without
retrieval is the dotted line. The paper: a sweet spot near ℓ=32 for BM25 and ℓ=64 for dense. retrievers.py reads each
retriever's best ℓ from this CSV.

The dense index of the whole sample (--dense-index-dir) is built on first use if missing: encoding the ~666k
passages in bfloat16 takes about 3 hours on a 2-core CPU, and an interrupted build resumes. Run `--retrievers bm25`
first to have the BM25 half meanwhile; the dense points are then added by a later run.

    python benchmarks/figures/query_length.py                    # docs/figures/query_length.{csv,png}; resumable
    python benchmarks/figures/query_length.py --retrievers bm25  # the BM25 points only
"""

from __future__ import annotations

from benchmarks.figures import intervals, perplexity
from benchmarks.figures import plotting
from benchmarks.figures.resources import Resources

NAME = "query_length"
QUERY_LENGTHS = (8, 16, 32, 64, 128)


def points(res: Resources) -> list[dict]:
    args = res.args
    return perplexity.points_per_text(res, [{"retriever": kind, "query_length": ell} for kind in args.retrievers
                                            for ell in args.query_lengths])


def plot(rows: list[dict], path: str) -> None:
    datasets = sorted({row["data"] for row in rows})
    fig, axes = plotting.panels(len(datasets), rows=2)
    kept = perplexity.records(path.removesuffix(".png") + ".csv")
    series, settings = ("model", "retriever", "dtype"), perplexity.SETTINGS
    for ax, below, data in zip(axes[0], axes[1], datasets):
        here = [row for row in rows if row["data"] == data]
        retrieved = [row for row in here if row["retriever"] != "none"]
        plotting.draw_lines(ax, retrieved, "query_length", "token_ppl", series, settings, plotting.model_style,
                            interval=intervals.bounds)
        plotting.draw_baselines(ax, [row for row in here if row["retriever"] == "none"], "token_ppl",
                                ("model", "dtype"), settings, plotting.model_style, interval=intervals.bounds)
        perplexity.draw_changes(below, here, "query_length", kept, series, settings, plotting.model_style)
        for panel in (ax, below):
            plotting.log2_axis(panel, [float(row["query_length"]) for row in retrieved])
            panel.set_xlabel("query length ℓ (tokens)")
        ax.set_ylabel("token perplexity")
        ax.set_title(data, fontsize=9)
        ax.legend(fontsize=6)
    plotting.save(fig, path, rows, settings)


def best_query_lengths(rows: list[dict]) -> dict[tuple[str, str, str, str], int]:
    """``{(model, data, retriever, max_eval_tokens): ℓ}``: the query length with the lowest token perplexity among
    the rows of this figure's CSV.

    Example:
        >>> rows = [{"model": "M", "data": "D", "retriever": "bm25", "max_eval_tokens": "2048", "query_length": ell,
        ...          "token_ppl": ppl} for ell, ppl in (("16", "15.2"), ("32", "15.1"), ("64", "15.3"))]
        >>> best_query_lengths(rows)
        {('M', 'D', 'bm25', '2048'): 32}
    """
    best: dict[tuple, tuple[float, int]] = {}
    for row in rows:
        if row["retriever"] == "none":
            continue
        key = (row["model"], row["data"], row["retriever"], row["max_eval_tokens"])
        candidate = (float(row["token_ppl"]), int(row["query_length"]))
        best[key] = min(best.get(key, candidate), candidate)
    return {key: ell for key, (_, ell) in best.items()}


def main(argv=None) -> list[dict]:
    def flags(parser):
        parser.add_argument("--query-lengths", type=int, nargs="+", default=list(QUERY_LENGTHS))
        parser.add_argument("--retrievers", nargs="+", choices=["bm25", "dense"], default=["bm25", "dense"])

    return perplexity.main(__doc__, NAME, ["bm25", "dense"], flags, points, plot, argv)


if __name__ == "__main__":
    main()
