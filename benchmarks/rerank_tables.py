"""The paper's reranking results on our data (Table 1's rows, Table 3, Fig 7): token and word perplexity of
none / BM25 top-1 / zero-shot (the reader reranks itself) / zero-shot with the other model reranking / zero-shot with
the no-passage choice / predictive / oracle / random, for SmolLM2-135M and Gemma-3-270M (Gemma with a BOS in every
window, the fair baseline), on held-out Wikipedia and WikiText-103 test; L=512, s=4, ℓ=32, k=16, s'=16, BM25 over
the whole Wikipedia sample, bfloat16.

How it is computed, exactly and without waste: one pass of the reader per (reader, data) runs every window with each
of its k candidates and with no passage (``rerank_windows`` with the no-passage choice), which gives every candidate's
ranking NLL (the last s' prefix tokens) and its target NLL (the window's scored tokens). Every strategy is then a
choice per window, and its perplexity the sum of the chosen candidates' target NLLs: none = the no-passage candidate,
top-1 = candidate 0, zero-shot = the lowest ranking NLL among the passages (with the no-passage choice: among all),
oracle = the lowest target NLL among the passages, random = ``random_choice(seed 0, window)``. The other model's
ranking and the predictive reranker (``--predictive DIR``) only choose; their targets come from the same pass.

Cost per window (``s_per_window``): the pass's time for zero-shot / no-passage / oracle (they need every candidate's
input, k+1 of them per window here); a timed one-passage run (``score_windows`` with the top-1 passages, which also
checks the pass's top-1 perplexity) for none / top-1 / random; the other model's or the cross-encoder's ranking time
plus that one-passage run for the other-model and predictive rows.

Every pass is cached as JSON under ``--out`` (a rerun skips it), the table is printed, and the CSV and a bar chart go
to ``--figures-dir``::

    python benchmarks/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \\
        --out-dir ~/.cache/hf-ralm/heldout
    python benchmarks/rerank_tables.py --max-eval-tokens 1024 [--predictive ~/.cache/hf-ralm/reranker]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import torch

HOME = Path.home()
REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
MODELS = {  # name: (folder, BOS in every window)
    "SmolLM2-135M": ("smollm2-135m-instruct", False),
    "Gemma-3-270M": ("gemma-3-270m", True),
}
OTHER = {"SmolLM2-135M": "Gemma-3-270M", "Gemma-3-270M": "SmolLM2-135M"}
COLORS = {"none": "#999999", "BM25 top-1": "#4c72b0", "zero-shot": "#55a868",
          "zero-shot, other model reranks": "#8172b2", "zero-shot + no-passage choice": "#64b5cd",
          "predictive": "#dd8452", "oracle": "#c44e52", "random": "#937860"}
STRATEGIES = list(COLORS)  # the table's and the chart's order


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(HOME / ".cache/hf-ralm/rerank-tables"), help="cached passes")
    parser.add_argument("--figures-dir", default=str(REPO / "docs" / "figures"))
    parser.add_argument("--models-dir", default=str(HOME / ".cache/hf-ralm/models"))
    parser.add_argument("--index-dir", default=str(HOME / ".cache/hf-ralm/index/wikipedia-2015-sample-bm25"))
    parser.add_argument("--heldout-dir", default=str(HOME / ".cache/hf-ralm/heldout"))
    parser.add_argument("--max-eval-tokens", type=int, default=2048)
    parser.add_argument("--predictive", help="a trained predictive reranker folder (hf-ralm train-reranker)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default=None)
    return parser.parse_args(argv)


class Run:
    """One (reader, data): its model, text, windows, queries and k candidates (retrieval is cheap and redone)."""

    def __init__(self, reader: str, data: str, args, retrievers: dict):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from hf_ralm import RalmConfig
        from hf_ralm.data import load_dataset_text
        from hf_ralm.evaluation import retrieve_for_windows, tokenize_text, window_queries
        from hf_ralm.windows import count_words, plan_windows

        folder, bos = MODELS[reader]
        path = os.path.join(args.models_dir, folder)
        self.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.config = RalmConfig(retrieval_stride=4, query_length=32, max_length=512, rerank="lm",
                                 rerank_candidates=16, rerank_tokens=16, rerank_allow_no_passage=True,
                                 bos_every_window=bos)
        data_path, _ = datasets(args)[data]
        text = load_dataset_text(data_path)
        self.ids = tokenize_text(self.tokenizer, text, args.max_eval_tokens)
        if len(self.ids) == args.max_eval_tokens:
            text = self.tokenizer.decode(self.ids)
        self.num_words = count_words(text)
        self.windows = plan_windows(len(self.ids), 512, 4)
        self.queries = window_queries(self.tokenizer, self.ids, self.windows, 32)
        self.candidates = retrieve_for_windows(retrievers[data], self.queries, 16, show_progress=False)


def datasets(args) -> dict:
    return {
        "held-out Wikipedia": (os.path.join(args.heldout_dir, "rows.jsonl"),
                               os.path.join(args.heldout_dir, "titles.txt")),
        "WikiText-103 test": (str(SHARED / "wikitext-103" / "test.jsonl"),
                              str(SHARED / "wikitext-103" / "forbidden_titles.txt")),
    }


def cached(path: str, compute) -> dict:
    from hf_ralm.retrieval.jsonfile import write_json_atomic

    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    result = compute()
    write_json_atomic(path, result)
    return result


def reader_pass(run: Run, batch_size: int) -> dict:
    """Every candidate's (and no passage's) ranking and target NLL sums, per window."""
    from hf_ralm.reranking.lm import rerank_windows

    t0 = time.perf_counter()
    outcome = rerank_windows(run.model, run.tokenizer, run.ids, run.windows, run.queries, run.candidates, run.config,
                             batch_size=batch_size)
    seconds = time.perf_counter() - t0
    unranked = [w for w in run.windows if outcome.target_nlls[w.index] is None]
    base = sum(float(outcome.token_nlls[w.score_begin : w.end].sum()) for w in unranked)
    return {"seconds": seconds, "base_nll": base, "ranking": outcome.ranking_nlls, "targets": outcome.target_nlls,
            "num_tokens": len(run.ids), "num_words": run.num_words, "num_windows": len(run.windows)}


def one_passage_pass(run: Run, batch_size: int) -> dict:
    """The reader scoring every window with its top-1 passage: the cost of a one-passage strategy."""
    from hf_ralm.model_inputs import window_prefixes
    from hf_ralm.scoring import score_windows

    prefixes = window_prefixes(run.tokenizer, run.windows, run.candidates, run.config)
    t0 = time.perf_counter()
    nll = score_windows(run.model, run.ids, run.windows, prefixes, batch_size)
    return {"seconds": time.perf_counter() - t0, "nll_sum": float(nll[1:].sum())}


def other_model_pass(run: Run, other: str, args) -> dict:
    """Another LM (the other model) ranks the reader's candidates in text; its choices and time."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_ralm import RalmConfig
    from hf_ralm.reranking.lm import LMReranker, rerank_windows

    path = os.path.join(args.models_dir, MODELS[other][0])
    reranker = LMReranker(AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(run.device).eval(),
                          AutoTokenizer.from_pretrained(path), 512)
    config = RalmConfig(**{**run.config.to_dict(), "rerank_allow_no_passage": False})
    t0 = time.perf_counter()
    outcome = rerank_windows(run.model, run.tokenizer, run.ids, run.windows, run.queries, run.candidates, config,
                             reranker=reranker, batch_size=args.batch_size)
    return {"seconds": time.perf_counter() - t0, "chosen": outcome.chosen}


def predictive_pass(run: Run, folder: str) -> dict:
    """The trained cross-encoder chooses among the reader's candidates; its choices and time."""
    from hf_ralm import RalmConfig
    from hf_ralm.reranking.lm import load_reranker, rerank_windows

    config = RalmConfig(**{**run.config.to_dict(), "rerank": "predictive", "reranker_model": folder,
                           "rerank_allow_no_passage": False})
    reranker = load_reranker(config, run.model)
    t0 = time.perf_counter()
    outcome = rerank_windows(run.model, run.tokenizer, run.ids, run.windows, run.queries, run.candidates, config,
                             reranker=reranker)
    return {"seconds": time.perf_counter() - t0, "chosen": outcome.chosen}


def table_rows(reader: str, data: str, p: dict, single: dict, other: dict, predictive: dict | None) -> list[dict]:
    """Every strategy's perplexity from the reader pass's NLL sums (see the module docstring)."""
    from hf_ralm.reranking.rules import choose_lowest, random_choice

    windows = [(i, r, t) for i, (r, t) in enumerate(zip(p["ranking"], p["targets"])) if t is not None]

    def total(pick) -> float:  # pick(window index, ranking sums, target sums) -> the chosen candidate's index
        return p["base_nll"] + sum(t[pick(i, r, t)] for i, r, t in windows)

    def by_choice(chosen):  # -1 (none chosen) is the no-passage candidate, the last
        return lambda i, r, t: chosen[i] if chosen[i] >= 0 else len(t) - 1

    n = p["num_windows"]
    picks = {
        "none": (lambda i, r, t: len(t) - 1, single["seconds"]),
        "BM25 top-1": (lambda i, r, t: 0, single["seconds"]),
        "zero-shot": (lambda i, r, t: choose_lowest(r[:-1]), p["seconds"]),
        "zero-shot, other model reranks": (by_choice(other["chosen"]), other["seconds"] + single["seconds"]),
        "zero-shot + no-passage choice": (lambda i, r, t: choose_lowest(r), p["seconds"]),
        "oracle": (lambda i, r, t: choose_lowest(t[:-1]), p["seconds"]),
        "random": (lambda i, r, t: random_choice(0, i, len(t) - 1), single["seconds"]),
    }
    if predictive is not None:
        picks["predictive"] = (by_choice(predictive["chosen"]), predictive["seconds"] + single["seconds"])
    rows = []
    for strategy in STRATEGIES:
        if strategy not in picks:
            continue
        pick, seconds = picks[strategy]
        nll = total(pick)
        rows.append({"data": data, "reader": reader, "strategy": strategy,
                     "reranker": OTHER[reader] if strategy.startswith("zero-shot, other") else "",
                     "token_ppl": float(torch.tensor(nll / p["num_tokens"]).exp()),
                     "word_ppl": float(torch.tensor(nll / p["num_words"]).exp()),
                     "s_per_window": seconds / n, "windows": n, "tokens": p["num_tokens"]})
    check = abs(single["nll_sum"] - total(lambda i, r, t: 0)) / single["nll_sum"]
    print(f"[tables] {reader} / {data}: top-1 from the pass vs a separate one-passage run: relative NLL difference "
          f"{check:.1e}", file=sys.stderr)
    return rows


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["reader"], r["data"]) for r in rows})
    strategies = [s for s in STRATEGIES if any(r["strategy"] == s for r in rows)]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 4.2), squeeze=False)
    for ax, (reader, data) in zip(axes[0], groups):
        values = {r["strategy"]: r["token_ppl"] for r in rows if (r["reader"], r["data"]) == (reader, data)}
        bars = ax.bar(range(len(strategies)), [values.get(s, float("nan")) for s in strategies],
                      color=[COLORS[s] for s in strategies])
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.set_xticks(range(len(strategies)), strategies, rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{reader}\n{data}", fontsize=9)
        ax.set_ylabel("token perplexity")
        low = min(values.values())
        ax.set_ylim(low * 0.9, max(values.values()) * 1.04)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main(argv=None) -> int:
    args = parse_args(argv)
    from hf_ralm.retrieval.base import read_forbidden_titles
    from hf_ralm.retrieval.bm25 import BM25Retriever

    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.figures_dir, exist_ok=True)
    retrievers = {data: BM25Retriever.load(args.index_dir, forbidden_titles=read_forbidden_titles(titles))
                  for data, (_, titles) in datasets(args).items()}
    rows = []
    for data in datasets(args):
        for reader in MODELS:
            stem = os.path.join(args.out, f"{reader}.{data}.{args.max_eval_tokens}".replace(" ", "_"))
            run = None

            def get_run():
                nonlocal run
                run = run or Run(reader, data, args, retrievers)
                return run

            p = cached(f"{stem}.pass.json", lambda: reader_pass(get_run(), args.batch_size))
            single = cached(f"{stem}.top1.json", lambda: one_passage_pass(get_run(), args.batch_size))
            other = cached(f"{stem}.other.json", lambda: other_model_pass(get_run(), OTHER[reader], args))
            predictive = None
            if args.predictive:
                predictive = cached(f"{stem}.predictive.json", lambda: predictive_pass(get_run(), args.predictive))
            rows += table_rows(reader, data, p, single, other, predictive)

    csv_path = os.path.join(args.figures_dir, "rerank_results.csv")
    with open(csv_path + ".tmp", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(csv_path + ".tmp", csv_path)
    plot(rows, os.path.join(args.figures_dir, "rerank_results.png"))
    print("| data | reader | strategy | token ppl | word ppl | s / window |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        name = r["strategy"] + (f" ({r['reranker']})" if r["reranker"] else "")
        print(f"| {r['data']} | {r['reader']} | {name} | {r['token_ppl']:.3f} | {r['word_ppl']:.3f} | "
              f"{r['s_per_window']:.2f} |")
    print(f"\n(first {args.max_eval_tokens} tokens, L=512, s=4, ℓ=32, k=16, s'=16, bfloat16; {csv_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
