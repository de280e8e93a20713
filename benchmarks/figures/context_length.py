"""Ours (the paper fixed L=1,024): perplexity against the window length L ∈ {256, 512, 1024, 2048}, without
retrieval and with BM25 over the whole Wikipedia sample (s=4, ℓ=32), both models (Gemma with a BOS in every
window), held-out Wikipedia and WikiText-103 test. A passage overwrites up to 256 of a window's tokens (the
reference's rule; 252 at L=256, where the window must still hold the stride after it), so it costs a smaller share
of the context as L grows: does retrieval's gain appear then? The lower panels give retrieval's relative change of
perplexity at each L.

Every point scores the same tokens: the --max-eval-tokens tokens that follow the first 2,048 (the largest L), each
with a full window of L tokens of text before it (perplexity.eval_slice). Counting from the start of the text instead
would score the first L tokens in window 0, without retrieval: at L=2048 a 2,048-token evaluation would have no
retrieval at all. So this figure's L=512 points differ from the other figures' (which count from the start, as the
tables do).

    python benchmarks/figures/context_length.py                 # docs/figures/context_length.{csv,png}; resumable
"""

from __future__ import annotations

from benchmarks.figures import intervals, perplexity
from benchmarks.figures import plotting
from benchmarks.figures.resources import Resources

NAME = "context_length"
MAX_LENGTHS = (256, 512, 1024, 2048)


def points(res: Resources) -> list[dict]:
    from hf_ralm import RalmConfig

    lengths, defaults = res.args.max_lengths, RalmConfig()
    return perplexity.points_per_text(res, [
        {"retriever": kind, "max_length": length, "context_tokens": max(lengths),
         # a window must hold the passage and the stride after it (RalmConfig.check_room): 252 tokens at L=256
         "max_doc_tokens": min(defaults.max_doc_tokens, length - defaults.retrieval_stride)}
        for kind in ("none", "bm25") for length in lengths], baseline=False)


def plot(rows: list[dict], path: str) -> None:
    datasets = sorted({row["data"] for row in rows})
    fig, axes = plotting.panels(len(datasets), rows=2)
    kept = perplexity.records(path.removesuffix(".png") + ".csv")
    # max_doc_tokens follows L (252 at L=256): a point's passage cap must not split its line from the other Ls'
    series = ("model", "retriever", "dtype")
    settings = tuple(column for column in perplexity.SETTINGS if column != "max_doc_tokens")
    for column, data in enumerate(datasets):
        here = [row for row in rows if row["data"] == data]
        top, bottom = axes[0][column], axes[1][column]
        plotting.draw_lines(top, here, "max_length", "token_ppl", series, settings, plotting.model_style,
                            interval=intervals.bounds)
        top.set_ylabel("token perplexity")
        top.set_title(data, fontsize=9)
        top.legend(fontsize=6)
        perplexity.draw_changes(bottom, here, "max_length", kept, series, settings, plotting.model_style)
        for ax in (top, bottom):
            plotting.log2_axis(ax, [float(row["max_length"]) for row in here])
            ax.set_xlabel("window length L (tokens)")
    plotting.save(fig, path, rows, settings)


def main(argv=None) -> list[dict]:
    def flags(parser):
        parser.add_argument("--max-lengths", type=int, nargs="+", default=list(MAX_LENGTHS))

    return perplexity.main(__doc__, NAME, ["bm25"], flags, points, plot, argv)


if __name__ == "__main__":
    main()
