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
import os
import sys
import time

from bench_setup import READERS, load_reader
from table_runs import Run, add_run_args, cached, chosen_nll, load_retrievers, perplexities, reader_pass

OTHER = {"SmolLM2-135M": "Gemma-3-270M", "Gemma-3-270M": "SmolLM2-135M"}
COLORS = {"none": "#999999", "BM25 top-1": "#4c72b0", "zero-shot": "#55a868",
          "zero-shot, other model reranks": "#8172b2", "zero-shot + no-passage choice": "#64b5cd",
          "predictive": "#dd8452", "oracle": "#c44e52", "random": "#937860"}
STRATEGIES = list(COLORS)  # the table's and the chart's order
K = 16


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(parser, "rerank-tables")
    parser.add_argument("--predictive", help="a trained predictive reranker folder (hf-ralm train-reranker)")
    return parser.parse_args(argv)


def rerank_run(reader: str, data: str, args, retrievers: dict) -> Run:
    """A run with k=16 candidates, ranked by the reader on s'=16 tokens with the no-passage choice."""
    return Run(reader, data, args, retrievers, K, rerank="lm", rerank_candidates=K, rerank_tokens=16,
               rerank_allow_no_passage=True)


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
    from hf_ralm import RalmConfig
    from hf_ralm.reranking.lm import LMReranker, rerank_windows

    reranker = LMReranker(*load_reader(args.models_dir, other, "bfloat16", run.device), 512)
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
        nll = chosen_nll(p, pick)
        rows.append({"data": data, "reader": reader, "strategy": strategy,
                     "reranker": OTHER[reader] if strategy.startswith("zero-shot, other") else "",
                     **perplexities(p, nll), "s_per_window": seconds / n, "windows": n, "tokens": p["num_tokens"]})
    check = abs(single["nll_sum"] - chosen_nll(p, lambda i, r, t: 0)) / single["nll_sum"]
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
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.figures_dir, exist_ok=True)
    retrievers = load_retrievers(args)
    rows = []
    for data in retrievers:
        for reader in READERS:
            stem = os.path.join(args.out, f"{reader}.{data}.{args.max_eval_tokens}".replace(" ", "_"))
            run = None

            def get_run():
                nonlocal run
                run = run or rerank_run(reader, data, args, retrievers)
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
