"""What a larger datastore buys (docs/results.md): the paired change in token perplexity of BM25 top-1 and of the lm
gate (2 nats) against no retrieval, with 95% intervals, as the datastore grows from 1% to 100% of the Wikipedia
sample, from the records of ``benchmarks/tables/datastore_runs.sh``: SmolLM2-135M-Instruct (bf16), L=512, s=4, l=32,
the first 8,192 tokens of WikiText-103 test and of the 100 held-out articles (each excluded from retrieval at every
size), BM25 over nested seeded article subsets (benchmarks/data/make_subsets.py).

Each size's rows come from its one reader pass of ``eval-lm --compare`` (every window with retrieval's top passage
and without one; records under results/datastore/<p>pct/<text>/candidates-k1), so the changes are paired: the same
windows, the same tokens. An 8,192-token slice holds a few articles only, too few to resample, so the intervals
resample the slice's windows in contiguous blocks (benchmarks/figures/intervals.py: blocks of 8 windows, 2,000
draws, seed 0; the first window, which never retrieves, counted in every draw): they say how sure a change is for
THIS slice, not how it would move on other text. The no-retrieval row scores the same windows without a passage at
every size; the script checks that its perplexity agrees across the sizes (within ``NONE_TOLERANCE``: records from
different machines round bfloat16 otherwise) and prints by how much it moves.

    bash benchmarks/tables/datastore_runs.sh          # the reader passes (resumable; CPU-hours: results/README.md)
    python benchmarks/tables/datastore_tables.py      # the table, docs/figures/datastore_size.csv and .png

It needs only the records, the texts (the shared data; the held-out rows, which datastore_runs.sh makes in seconds)
and the reader's tokenizer (no model weights, no index). A size whose records are incomplete is skipped with what is
missing; ``--partial`` prints the complete sizes and writes nothing unless every size is there.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.bench_setup import CACHE, MODELS_DIR, READERS, REPO, RESULTS, SHARED

RUNS = RESULTS / "datastore"
PERCENTS = (1, 3, 10, 30, 100)
TEXTS = {  # name: (records folder under <p>pct/, rows file)
    "WikiText-103 test": ("wikitext-103", SHARED / "wikitext-103" / "test.jsonl"),
    "held-out Wikipedia": ("heldout", CACHE / "heldout-100" / "rows.jsonl"),
}
STRATEGIES = ("none", "top1", "lm-gate")
LABELS = {"none": "no retrieval", "top1": "BM25 top-1", "lm-gate": "lm gate (2 nats)"}
MAX_EVAL_TOKENS = 8192
NONE_TOLERANCE = 1e-3  # how far the no-retrieval perplexity may move between sizes (machines: no_retrieval_spread)


@dataclass
class SizePass:
    """One size's pass over one text: per window (rows) and strategy (columns) the summed target NLL of the option
    the strategy chose, each window's scored tokens, the text's tokens, the datastore's passages, and per strategy
    the windows that had a passage in context of those that retrieved."""

    nll: np.ndarray  # (windows, strategies)
    counts: np.ndarray  # (windows,)
    num_tokens: int
    num_passages: int
    with_passage: np.ndarray  # (strategies,)
    retrievals: int

    def token_ppl(self, strategy: str) -> float:
        """The strategy's token perplexity over the text (token 0, never scored, in the denominator)."""
        return float(np.exp(self.nll[:, STRATEGIES.index(strategy)].sum() / self.num_tokens))


def load_size(percent: int, name: str, tokenizer) -> SizePass | str:
    """The records of ``name`` at ``percent``% of the sample, per window and strategy; or why they cannot be."""
    from hf_ralm import RalmConfig, digest, load_dataset_text, prepare, strategy_choices
    from hf_ralm.selection import CandidateRecordWriter, CandidateScores

    folder, rows_file = TEXTS[name]
    records = RUNS / f"{percent}pct" / folder / "candidates-k1"
    if not (records / CandidateRecordWriter.settings_file).is_file():
        return f"no records in {records}: run bash benchmarks/tables/datastore_runs.sh"
    if not Path(rows_file).is_file():
        return f"{rows_file} is missing: bash benchmarks/tables/datastore_runs.sh makes it (seconds) before its runs"
    settings, _ = CandidateRecordWriter.read_settings(records)
    config = RalmConfig(max_length=settings["max_length"], retrieval_stride=settings["retrieval_stride"],
                        query_length=settings["query_length"], rerank_tokens=settings["rerank_tokens"])
    plan = prepare(load_dataset_text(str(rows_file)), tokenizer, config, max_length=settings["window_length"],
                   max_eval_tokens=MAX_EVAL_TOKENS)
    if settings["tokens"] != f"{len(plan.ids)} tokens, {digest(plan.ids)}":
        return f"{records} holds the records of another text or tokenizer ({settings['tokens']})"
    scores = [CandidateScores(**row) for row in CandidateRecordWriter.read_rows(records)]
    if [s.window for s in scores] != list(range(len(plan.windows))):
        return f"{records} holds {len(scores):,} of {len(plan.windows):,} windows"
    chosen = strategy_choices(STRATEGIES, scores, config)  # --compare's rows
    options = np.array([[chosen[name][s.window] for name in STRATEGIES] for s in scores])
    nll = np.array([[s.target_nlls[o] for o in row] for s, row in zip(scores, options)])
    no_passage = np.array([s.no_passage for s in scores])
    return SizePass(nll, np.array([w.num_scored for w in plan.windows]), len(plan.ids),
                    settings["index"]["num_passages"], (options != no_passage[:, None]).sum(axis=0),
                    sum(1 for w in plan.windows if w.has_retrieval))


def size_rows(percent: int, name: str, size: SizePass) -> list[dict]:
    """Each strategy's token perplexity at this size and, but for no retrieval, its paired change against no
    retrieval with its 95% interval (blocks of windows; see the module docstring)."""
    from benchmarks.figures.intervals import BLOCK_WINDOWS, change_interval, ppl_interval

    unscored = size.num_tokens - int(size.counts.sum())  # token 0: in the paper's denominator, never scored
    none = STRATEGIES.index("none")
    rows = []
    for j, strategy in enumerate(STRATEGIES):
        row = {"data": name, "percent": percent, "num_passages": size.num_passages, "strategy": strategy,
               "token_ppl": size.token_ppl(strategy)}
        row["token_ppl_low"], row["token_ppl_high"] = ppl_interval(size.nll[:, j], block=BLOCK_WINDOWS,
                                                                   counts=size.counts, unscored=unscored)
        if j != none:
            row["vs_none"] = row["token_ppl"] / rows[none]["token_ppl"] - 1.0
            low, high = change_interval(size.nll[:, j], size.nll[:, none], block=BLOCK_WINDOWS, counts=size.counts,
                                        fixed=1, unscored=unscored)
            row["vs_none_low"], row["vs_none_high"] = low / 100, high / 100
        row["retrieved_fraction"] = float(size.with_passage[j] / size.retrievals) if size.retrievals else None
        rows.append(row)
    return rows


def plot(rows: list[dict], path: str) -> None:
    """Per text, the change against no retrieval of each strategy as the datastore grows (log scale of passages)."""
    from benchmarks.figures.plotting import pyplot

    plt = pyplot()
    texts = list(dict.fromkeys(r["data"] for r in rows))
    fig, axes = plt.subplots(1, len(texts), figsize=(5.6 * len(texts), 4.2), squeeze=False)
    colors = {"top1": "#4c72b0", "lm-gate": "#8172b2"}
    for ax, data in zip(axes[0], texts):
        for offset, strategy in ((0.97, "top1"), (1.03, "lm-gate")):  # apart, so that the bars do not hide
            mine = [r for r in rows if r["data"] == data and r["strategy"] == strategy]
            x = [r["num_passages"] * offset for r in mine]
            y = [100 * r["vs_none"] for r in mine]
            err = [[100 * (r["vs_none"] - r["vs_none_low"]) for r in mine],
                   [100 * (r["vs_none_high"] - r["vs_none"]) for r in mine]]
            ax.errorbar(x, y, yerr=err, fmt="o-", color=colors[strategy], capsize=4, label=LABELS[strategy])
        ax.set_xscale("log")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xlabel("passages in the datastore (1% to 100% of the Wikipedia sample)")
        ax.set_ylabel("change in token perplexity against no retrieval (%)")
        ax.set_title(f"{data}, first {MAX_EVAL_TOKENS:,} tokens (95% interval)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    fig.suptitle("SmolLM2-135M (bf16), L=512, s=4, l=32: what a larger BM25 datastore buys", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def change(row: dict) -> str:
    """A row's change against no retrieval with its interval, in percent: ``-4.65% (-6.87 to -2.93)``."""
    return f"{100 * row['vs_none']:+.2f}% ({100 * row['vs_none_low']:+.2f} to {100 * row['vs_none_high']:+.2f})"


def table(rows: list[dict], name: str) -> list[str]:
    """The markdown table of one text: a line per size."""
    lines = [f"\n{name}, first {MAX_EVAL_TOKENS:,} tokens:",
             "| datastore | passages | no retrieval ppl | BM25 top-1 vs none (95% CI) | lm gate vs none (95% CI) "
             "| windows with a passage (top-1 / gate) |", "|---|---:|---:|---|---|---:|"]
    for percent in PERCENTS:
        by = {r["strategy"]: r for r in rows if r["data"] == name and r["percent"] == percent}
        if not by:
            continue
        top1, gate = by["top1"]["retrieved_fraction"], by["lm-gate"]["retrieved_fraction"]
        lines.append(f"| {percent}% | {by['none']['num_passages']:,} | {by['none']['token_ppl']:.3f} | "
                     f"{change(by['top1'])} | {change(by['lm-gate'])} | {100 * top1:.1f}% / {100 * gate:.1f}% |")
    return lines


def no_retrieval_spread(name: str, sizes: dict[int, SizePass]) -> float:
    """The largest relative difference of the no-retrieval token perplexity between two of ``sizes``; exits when it
    exceeds ``NONE_TOLERANCE`` (another reader, dtype, text or batch size: the sizes would not be comparable).

    Every size scores the same windows without a passage, so the row would be identical to the last digit if every
    record came from one machine. The records are computed over several sessions, on whichever machine each one got,
    and a bfloat16 forward on another CPU rounds otherwise (measured here: some windows' NLLs move by up to 2 nats,
    the row's perplexity by about 1e-4). Each window's options still come from one forward pass on one machine, so a
    size's paired changes are unaffected; the check bounds what the mixing does to the row they are measured from."""
    ppl = [size.token_ppl("none") for size in sizes.values()]
    if not ppl:
        return 0.0
    spread = max(ppl) / min(ppl) - 1.0
    if spread > NONE_TOLERANCE:
        sys.exit(f"{name}: the no-retrieval token perplexity differs by {spread:.2e} (relative) between the sizes "
                 f"({', '.join(f'{p}%: {v:.4f}' for p, v in zip(sizes, ppl))}), more than {NONE_TOLERANCE:.0e}: "
                 "another reader, dtype or batch size? The sizes cannot be compared")
    return spread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", default=str(REPO / "docs" / "figures" / "datastore_size.csv"))
    parser.add_argument("--figure", default=str(REPO / "docs" / "figures" / "datastore_size.png"))
    parser.add_argument("--partial", action="store_true",
                        help="print the sizes whose records are complete although others are not (writes nothing)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(MODELS_DIR, READERS["SmolLM2-135M"].folder))
    rows, missing = [], []
    for name in TEXTS:
        sizes = {}
        for percent in PERCENTS:
            loaded = load_size(percent, name, tokenizer)
            if isinstance(loaded, str):
                missing.append(f"{name} at {percent}%: {loaded}")
                continue
            sizes[percent] = loaded
            rows += size_rows(percent, name, loaded)
        spread = no_retrieval_spread(name, sizes)
        print("\n".join(table(rows, name)))
        print(f"no retrieval: {spread:.2e} relative spread of its token perplexity across the sizes "
              f"(tolerance {NONE_TOLERANCE:.0e})")
    for line in missing:
        print(f"skipped: {line}", file=sys.stderr)
    if missing and not args.partial:
        sys.exit("not every size's records are complete: give --partial to print those that are")
    if missing or not rows:
        print("\nnothing written: the sizes above are not all of them", file=sys.stderr)
        return
    with open(args.csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, args.figure)
    print(f"\nwrote {args.csv} and {args.figure}")


if __name__ == "__main__":
    main()
