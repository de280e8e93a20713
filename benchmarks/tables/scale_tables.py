"""The whole-test-set figures of docs/results.md ("Whole test sets"), with 95% intervals, from the records of
``benchmarks/tables/scale_runs.sh``: SmolLM2-135M-Instruct (bf16), none / BM25 top-1 / lm gate (2 nats), L=512, s=4,
l=32, BM25 over the whole Wikipedia sample, on the whole WikiText-103 test set and on 100 held-out Wikipedia articles.

Every row comes from the one reader pass of ``eval-lm --compare`` (each window with retrieval's top passage and
without one; records under results/scale/<text>/candidates-k1), so the rows are paired: the same windows, the
same tokens. The intervals are a cluster bootstrap over articles (2,000 resamples of the articles with replacement,
seed 0, percentile intervals): windows of one article share its topic and whether the corpus holds passages about
it, so they are not independent draws, while the articles are (62 in WikiText-103 test, 100 held out). A window
belongs to the article its first scored token lies in; an article starts at its level-1 heading (`` = Title = ``).
Each resample recomputes the token and word perplexity of every row as the paper defines them (summed NLL over the
tokens, or the words, of the resampled articles) and each row's changes against no retrieval and against top-1
on the same resample.

    bash benchmarks/tables/scale_runs.sh      # the reader passes (resumable; many CPU-hours: see results/README.md)
    python benchmarks/tables/scale_tables.py  # the table, docs/figures/scale_results.csv and .png

It needs only the records, the shared data and the reader's tokenizer (no model weights, no index). A text whose
records are incomplete is skipped with what is missing (``--partial`` prints its figures over the complete
articles so far instead, labelled as such, and writes no file).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.bench_setup import CACHE, MODELS_DIR, READERS, REPO, RESULTS, SHARED, WIKIPEDIA

RUNS = RESULTS / "scale"
TEXTS = {  # name: (records folder, rows file)
    "WikiText-103 test": ("wikitext-103-test", SHARED / "wikitext-103" / "test.jsonl"),
    "held-out Wikipedia (100 articles)": ("heldout-100", CACHE / "heldout-100" / "rows.jsonl"),
}
STRATEGIES = ("none", "top1", "lm-gate")
LABELS = {"none": "no retrieval", "top1": "BM25 top-1", "lm-gate": "lm gate (2 nats)"}
PAPER_WORDS = 245_569  # the WikiText-103 test set's word count in the paper's setting
HEADING = re.compile(r"^ = ([^=].*?) = $", re.MULTILINE)  # a level-1 heading: " = Title = " (sections: " = = X = = ")


@dataclass
class ArticleSums:
    """Per article (rows) and strategy (columns) the summed target NLL, and per article its tokens and words."""

    titles: list[str]
    nll: np.ndarray  # (articles, strategies)
    tokens: np.ndarray  # (articles,)
    words: np.ndarray  # (articles,)
    with_passage: np.ndarray  # (strategies,) windows with a passage in context
    retrievals: int  # windows that retrieved (all but window 0)


def article_starts(text: str) -> list[tuple[int, str]]:
    """``(character offset, title)`` of every article of ``text``, by its level-1 heading; what precedes the first
    heading belongs to the first article.

    Example:
        >>> article_starts(" \\n = Rome = \\n = = History = = \\n text \\n = Nero = \\n more \\n")
        [(0, 'Rome'), (38, 'Nero')]
    """
    starts = [(m.start(), m.group(1)) for m in HEADING.finditer(text)]
    if not starts:
        return [(0, "(the whole text)")]
    return [(0, starts[0][1]), *starts[1:]]


def article_sums(text: str, offsets: list[tuple[int, int]], windows, scores, choose) -> ArticleSums:
    """Sum each strategy's chosen target NLLs, the tokens and the words per article. ``offsets[t]`` is token ``t``'s
    character span in ``text``; ``choose(name, scores)`` the option a strategy takes in a window."""
    from hf_ralm import count_words

    starts = article_starts(text)
    char_starts = [c for c, _ in starts]
    article_of_token = [max(0, bisect_right(char_starts, begin) - 1) for begin, _ in offsets]
    num = len(starts)
    nll = np.zeros((num, len(STRATEGIES)))
    tokens = np.bincount(article_of_token, minlength=num).astype(float)  # every token of the text, as the paper
    bounds = [*char_starts[1:], len(text)]
    words = np.array([count_words(text[begin:end]) for begin, end in zip(char_starts, bounds)], dtype=float)
    with_passage = np.zeros(len(STRATEGIES))
    for w, s in zip(windows, scores):
        article = article_of_token[w.score_begin]
        for j, name in enumerate(STRATEGIES):
            option = choose(name, s)
            nll[article, j] += s.target_nlls[option]
            with_passage[j] += option != s.no_passage
    retrievals = sum(1 for w in windows if w.has_retrieval)
    return ArticleSums([t for _, t in starts], nll, tokens, words, with_passage, retrievals)


def bootstrap_rows(sums: ArticleSums) -> list[dict]:
    """Each strategy's token and word perplexity over all articles, with 95% percentile intervals from resamples of
    the articles (:mod:`benchmarks.figures.intervals` with an article as the unit: every call draws the same
    resamples), and its changes against no retrieval and against BM25 top-1, each paired on the same resamples,
    with its interval (the gate against top-1 says whether choosing when to retrieve beats always retrieving)."""
    from benchmarks.figures.intervals import change_interval, ppl_interval

    rows = []
    total = sums.nll.sum(axis=0)
    for j, name in enumerate(STRATEGIES):
        point = float(np.exp(total[j] / sums.tokens.sum()))
        row = {"strategy": name, "token_ppl": point}
        row["token_ppl_low"], row["token_ppl_high"] = ppl_interval(sums.nll[:, j], block=1, counts=sums.tokens)
        row["word_ppl"] = float(np.exp(total[j] / sums.words.sum()))
        row["word_ppl_low"], row["word_ppl_high"] = ppl_interval(sums.nll[:, j], block=1, counts=sums.words)
        for base, key in ((STRATEGIES.index("none"), "vs_none"), (STRATEGIES.index("top1"), "vs_top1")):
            row[key] = point / float(np.exp(total[base] / sums.tokens.sum())) - 1.0
            low, high = change_interval(sums.nll[:, j], sums.nll[:, base], block=1, counts=sums.tokens)
            row[f"{key}_low"], row[f"{key}_high"] = low / 100, high / 100
        row["retrieved_fraction"] = float(sums.with_passage[j] / sums.retrievals) if sums.retrievals else None
        rows.append(row)
    return rows


@dataclass
class TextPass:
    """What the records of one text give: the article sums (of the complete articles so far when ``partial``), the
    text's word count by the reference's rule, and its windows (those read, of all)."""

    sums: ArticleSums
    num_words: int
    num_windows: int
    total_windows: int

    @property
    def partial(self) -> bool:
        return self.num_windows < self.total_windows


def load_pass(name: str, tokenizer, partial: bool) -> TextPass | str:
    """The records of text ``name`` summed per article; or why they cannot be (one line)."""
    from hf_ralm import RalmConfig, digest, load_dataset_text, prepare, strategy_choices
    from hf_ralm.selection import CandidateRecordWriter, CandidateScores

    folder, rows_file = TEXTS[name]
    records = RUNS / folder / "candidates-k1"
    if not (records / CandidateRecordWriter.settings_file).is_file():
        return f"no records in {records}: run bash benchmarks/tables/scale_runs.sh"
    if not Path(rows_file).is_file():
        sample = RUNS / f"{folder}-sample" / "sample.json"  # the settings a held-out text was drawn with
        if not sample.is_file():
            return f"{rows_file} is missing (the shared data: see its README)"
        s = json.loads(sample.read_text(encoding="utf-8"))
        return (f"{rows_file} is missing: make it from the corpus (seconds) with python "
                f"benchmarks/data/make_heldout.py --corpus {WIKIPEDIA} --out-dir {Path(rows_file).parent} "
                f"--num-articles {s['num_articles']} "
                f"--min-words {s['min_words']} --max-words {s['max_words']} --seed {s['seed']}")
    settings, _ = CandidateRecordWriter.read_settings(records)
    config = RalmConfig(max_length=settings["max_length"], retrieval_stride=settings["retrieval_stride"],
                        query_length=settings["query_length"], rerank_tokens=settings["rerank_tokens"])
    text = load_dataset_text(str(rows_file))
    plan = prepare(text, tokenizer, config, max_length=settings["window_length"])
    if settings["tokens"] != f"{len(plan.ids)} tokens, {digest(plan.ids)}":
        return f"{records} holds the records of another text or tokenizer ({settings['tokens']})"
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    scores = [CandidateScores(**row) for row in CandidateRecordWriter.read_rows(records)]
    contiguous = next((i for i, s in enumerate(scores) if s.window != i), len(scores))  # before a worker's gap
    if contiguous < len(plan.windows):
        if not partial:
            return (f"{records} holds {len(scores):,} of {len(plan.windows):,} windows (run bash "
                    "benchmarks/tables/scale_runs.sh until they are all there, or give --partial)")
        if contiguous < 2:
            return f"{records} holds no complete article yet"
    windows, scores = plan.windows[:contiguous], scores[:contiguous]

    chosen = strategy_choices(STRATEGIES, scores, config)  # --compare's rows, per window from 0 (as scores holds)

    def choose(strategy: str, s: CandidateScores) -> int:
        return chosen[strategy][s.window]

    end = windows[-1].end
    sums = article_sums(text[: offsets[end - 1][1]], offsets[:end], windows, scores, choose)
    if contiguous < len(plan.windows):  # the last article read is cut: keep the ones before it
        sums = ArticleSums(sums.titles[:-1], sums.nll[:-1], sums.tokens[:-1], sums.words[:-1], sums.with_passage,
                           sums.retrievals)
    return TextPass(sums, plan.num_words, len(windows), len(plan.windows))


def plot(rows: list[dict], path: str) -> None:
    from benchmarks.figures.plotting import pyplot

    plt = pyplot()

    texts = list(dict.fromkeys(r["data"] for r in rows))
    fig, axes = plt.subplots(2, len(texts), figsize=(5.2 * len(texts), 6.4), squeeze=False)
    colors = {"none": "#999999", "top1": "#4c72b0", "lm-gate": "#8172b2"}
    for col, data in enumerate(texts):
        mine = [r for r in rows if r["data"] == data]
        ppl, change = axes[0][col], axes[1][col]
        for y, r in enumerate(mine):
            ppl.errorbar(r["token_ppl"], y, xerr=[[r["token_ppl"] - r["token_ppl_low"]],
                                                  [r["token_ppl_high"] - r["token_ppl"]]],
                         fmt="o", color=colors[r["strategy"]], capsize=4)
            change.errorbar(100 * r["vs_none"], y, xerr=[[100 * (r["vs_none"] - r["vs_none_low"])],
                                                         [100 * (r["vs_none_high"] - r["vs_none"])]],
                            fmt="o", color=colors[r["strategy"]], capsize=4)
        for ax in (ppl, change):
            ax.set_yticks(range(len(mine)), [LABELS[r["strategy"]] for r in mine])
            ax.set_ylim(-0.6, len(mine) - 0.4)
            ax.grid(axis="x", alpha=0.3)
        ppl.set_xlim(0, max(r["token_ppl_high"] for r in mine) * 1.1)  # from zero: the differences are small
        ppl.set_title(f"{data}\ntoken perplexity (95% interval)", fontsize=10)
        change.axvline(0, color="black", linewidth=0.8)
        change.set_xlabel("change against no retrieval (%)")
        change.set_title("paired change (95% interval, articles resampled)", fontsize=10)
    fig.suptitle("SmolLM2-135M (bf16), L=512, s=4, l=32, BM25 over the Wikipedia sample: whole texts", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def change(row: dict, key: str) -> str:
    """A row's change ``key`` with its interval, in percent: ``-4.65% (-6.87 to -2.93)``."""
    return f"{100 * row[key]:+.2f}% ({100 * row[f'{key}_low']:+.2f} to {100 * row[f'{key}_high']:+.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", default=str(REPO / "docs" / "figures" / "scale_results.csv"))
    parser.add_argument("--figure", default=str(REPO / "docs" / "figures" / "scale_results.png"))
    parser.add_argument("--partial", action="store_true",
                        help="print the figures of the complete articles so far of an unfinished text (writes nothing)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(MODELS_DIR, READERS["SmolLM2-135M"].folder))
    rows, complete = [], True
    for name in TEXTS:
        loaded = load_pass(name, tokenizer, args.partial)
        if isinstance(loaded, str):
            print(f"{name}: skipped: {loaded}", file=sys.stderr)
            complete = False
            continue
        sums = loaded.sums
        print(f"\n{name}: {len(sums.titles)} articles, {loaded.num_windows:,} of {loaded.total_windows:,} windows, "
              f"{int(sums.tokens.sum()):,} tokens, {int(sums.words.sum()):,} words"
              + (" (PARTIAL: the complete articles so far)" if loaded.partial else ""))
        if name.startswith("WikiText") and not loaded.partial:
            print(f"word count of the whole test set: {loaded.num_words:,} (the paper's: {PAPER_WORDS:,}; "
                  f"{'equal' if loaded.num_words == PAPER_WORDS else 'DIFFERENT'})")
        print("| strategy | token ppl (95% CI) | word ppl (95% CI) | vs none (95% CI) | vs top-1 (95% CI) "
              "| windows with a passage |")
        print("|---|---|---|---|---|---:|")
        for row in bootstrap_rows(sums):
            rows.append({"data": name, **row, "articles": len(sums.titles), "tokens": int(sums.tokens.sum()),
                         "words": int(sums.words.sum()), "partial": loaded.partial})
            print(f"| {LABELS[row['strategy']]} | {row['token_ppl']:.3f} ({row['token_ppl_low']:.3f}-"
                  f"{row['token_ppl_high']:.3f}) | {row['word_ppl']:.3f} ({row['word_ppl_low']:.3f}-"
                  f"{row['word_ppl_high']:.3f}) | {change(row, 'vs_none')} | {change(row, 'vs_top1')} | "
                  f"{100 * (row['retrieved_fraction'] or 0):.1f}% |")
    if not complete or not rows or any(r["partial"] for r in rows):
        print("\nnothing written: the figures above are not those of the whole texts", file=sys.stderr)
        return
    from hf_ralm.utils import write_text_atomic
    import io

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(args.csv, out.getvalue(), suffix=".csv")
    plot(rows, args.figure)
    print(f"\nwrote {args.csv} and {args.figure}")


if __name__ == "__main__":
    main()
