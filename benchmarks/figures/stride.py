"""The paper's Figure 5 on our data: perplexity and cost against the retrieval stride s ∈ {1, 2, 4, 8, 16, 32, 64}
(64 is RETRO's). BM25 over the whole Wikipedia sample, L=512, ℓ=32, both models (Gemma with a BOS in every window),
held-out Wikipedia and WikiText-103 test, the first --max-eval-tokens tokens; each model's perplexity without
retrieval (at s=4) is the dotted line. The paper: the smaller s, the better.

Cost (the lower panels): the wall time of each point's evaluation (retrieval and scoring, one run, no warm-up, on
whatever else the machine runs) and its retrievals (one per window but the first, so about --max-eval-tokens / s).

    python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \\
        --out-dir ~/.cache/hf-ralm/heldout                    # once
    python benchmarks/figures/stride.py                       # docs/figures/stride.{csv,png}; resumable
    python benchmarks/figures/stride.py --plot-only           # redraw the PNG from the CSV
"""

from __future__ import annotations

from benchmarks.figures import intervals, perplexity
from benchmarks.figures import plotting
from benchmarks.figures.resources import Resources

NAME = "stride"
STRIDES = (1, 2, 4, 8, 16, 32, 64)


def points(res: Resources) -> list[dict]:
    return perplexity.points_per_text(res, [{"stride": s} for s in res.args.strides])


def plot(rows: list[dict], path: str) -> None:
    datasets = sorted({row["data"] for row in rows})
    fig, axes = plotting.panels(len(datasets), rows=3)
    kept = perplexity.records(path.removesuffix(".png") + ".csv")
    series, settings = ("model", "dtype"), perplexity.SETTINGS
    for column, data in enumerate(datasets):
        here = [row for row in rows if row["data"] == data]
        retrieved = [row for row in here if row["retriever"] != "none"]
        top, middle, bottom = axes[0][column], axes[1][column], axes[2][column]
        perplexity.draw_changes(middle, here, "stride", kept, series, settings, plotting.model_style)
        plotting.draw_lines(top, retrieved, "stride", "token_ppl", series, settings, plotting.model_style,
                            interval=intervals.bounds)
        plotting.draw_baselines(top, [row for row in here if row["retriever"] == "none"], "token_ppl", series,
                                settings, plotting.model_style, interval=intervals.bounds)
        top.set_title(data, fontsize=9)
        top.set_ylabel("token perplexity")
        plotting.draw_lines(bottom, retrieved, "stride", "wall_s", series, settings, plotting.model_style)
        plotting.log_y(bottom)
        bottom.set_ylabel("wall time of the evaluation (s)")
        twin = bottom.twinx()
        one_model = [row for row in retrieved if row["model"] == retrieved[0]["model"]]  # the same for every model
        plotting.draw_lines(twin, one_model, "stride", "num_retrievals", (), settings,
                            lambda row: {"color": "#999999", "linestyle": "--"})
        plotting.log_y(twin)
        twin.set_ylabel("retrievals (dashed)", color="#777777")
        for ax in (top, middle, bottom):
            plotting.log2_axis(ax, [float(row["stride"]) for row in retrieved])
            ax.set_xlabel("retrieval stride s (tokens)")
        top.legend(fontsize=6)
    plotting.save(fig, path, rows, settings)


def main(argv=None) -> list[dict]:
    def flags(parser):
        parser.add_argument("--strides", type=int, nargs="+", default=list(STRIDES))

    return perplexity.main(__doc__, NAME, ["bm25"], flags, points, plot, argv)


if __name__ == "__main__":
    main()
