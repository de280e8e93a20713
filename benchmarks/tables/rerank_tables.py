"""The paper's reranking results on our data (Table 1's rows, Table 3, Fig 7): token and word perplexity, and cost per
window, of none / BM25 top-1 / zero-shot (the reader reranks itself) / zero-shot with the other model reranking /
zero-shot with the no-passage choice at margins 0 and 2 nats / the lm gate (2 nats) / predictive (a trained
cross-encoder, with and without the no-passage candidate) / oracle (the best passage; with the no-passage choice,
the best of the passages and none: the floor for the rows that may go without a passage) / random, for SmolLM2-135M
and Gemma-3-270M (Gemma with a BOS in every window, the fair baseline), on held-out Wikipedia and WikiText-103 test;
L=512, s=4, ℓ=32, k=16, s'=16, BM25 over the whole Wikipedia sample, bfloat16.

How it is computed, exactly and without waste: one pass of the reader per (reader, data) runs every window with each
of its k candidates and with no passage (:func:`hf_ralm.selection.candidates.score_candidates`), which gives every
option's ranking NLL (the last s' prefix tokens) and target NLL (the window's scored tokens). Every strategy is then a
choice per window, and its perplexity the sum of the chosen options' target NLLs. The choices are the library's
selection policy under each row's settings, read from the pass
(:func:`hf_ralm.selection.candidates.choose_from_scores`, the strategies of :mod:`hf_ralm.selection.strategies`):
none = no passage, top-1 = candidate 0 (``rerank="none"``), zero-shot = the lowest ranking NLL among the passages
(``"lm"``; with the no-passage choice: a passage only when it saves the margin over no passage), the lm gate = the
same between candidate 0 and no passage (``retrieval_gate="lm"``), oracle = the lowest target NLL among the passages
(``"oracle"``; with the no-passage choice: among the passages and none), random = ``random_choice(seed 0, window)``
(``"random"``). The other model's ranking and the predictive
rerankers (``--predictive DIR``, ``--predictive-no-passage DIR``) only choose; their targets come from the same pass.

Every pass keeps its records (numbers and passage ids, gzip'd chunks of 32 windows) under ``--runs-dir`` (default
results/rerank-tables, committed to the repository), so a rerun, here or in a fresh clone, resumes after the
saved chunks and never computes one twice; a pass whose settings differ is refused.

Cost per window (``s_per_window``) comes from a side-by-side timing in one process on the first
``--timing-windows`` windows with retrieval of each (reader, data) (also kept as records): one forward per window
without a passage (none) and with its top passage (top-1, random), the k+1 inputs of the pass (zero-shot, with the
no-passage choice, oracle), the lm gate's two inputs, the other model's ranking and the cross-encoder's ranking
(each plus the one-passage forward that scores the choice)::

    python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \\
        --out-dir ~/.cache/hf-ralm/heldout
    python benchmarks/tables/rerank_tables.py --max-eval-tokens 1024 [--predictive DIR] [--predictive-no-passage DIR]

Each row also says how often the strategy chose the oracle's passage, and each (reader, data) how well the reader's
ranking NLL orders the passages by their target NLL (the mean Spearman correlation: near 0, zero-shot reranking has
nothing to go on). ``--readers`` and ``--data`` limit the (reader, data) pairs; ``--passes candidates other`` prints
the table of the passes done so far, without the cost column. ``--from-records`` prints the whole table from the
committed records alone, computing nothing and needing no reranker folder (the predictive rows are the recorded
choices; the readers are still loaded, to rebuild the windows and check the records' settings)::

    python benchmarks/tables/rerank_tables.py --max-eval-tokens 1024 --from-records

``--plot-only`` redraws the chart from the CSV.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

from benchmarks.bench_setup import READERS, RESULTS, load_reader
from benchmarks.tables.table_runs import DATA, Run, add_run_args, load_retrievers, perplexities

OTHER = {"SmolLM2-135M": "Gemma-3-270M", "Gemma-3-270M": "SmolLM2-135M"}
COLORS = {"none": "#999999", "BM25 top-1": "#4c72b0", "random": "#937860", "zero-shot": "#55a868",
          "zero-shot, other model reranks": "#8172b2", "zero-shot + no-passage choice (0 nats)": "#64b5cd",
          "zero-shot + no-passage choice (2 nats)": "#2a8ca8", "lm gate (2 nats)": "#b7b7e0",
          "predictive": "#dd8452", "predictive + no-passage candidate": "#f2b27a", "oracle": "#c44e52",
          "oracle + no-passage choice": "#8c2d30"}
STRATEGIES = list(COLORS)  # the table's and the chart's order
K = 16
CHUNK = 32  # windows per saved chunk of a pass
GATE_MARGIN = 2.0
PASSES = ("candidates", "other", "predictive", "timing")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(parser, "rerank-tables")
    parser.add_argument("--runs-dir", default=str(RESULTS / "rerank-tables"),
                        help="where each pass keeps its records (default: %(default)s)")
    parser.add_argument("--predictive", help="a predictive reranker trained over the k passages")
    parser.add_argument("--predictive-no-passage", help="one trained with the no-passage candidate too")
    parser.add_argument("--readers", nargs="+", default=list(READERS), choices=list(READERS))
    parser.add_argument("--data", nargs="+", default=list(DATA), choices=list(DATA), help="the texts (default: both)")
    parser.add_argument("--timing-windows", type=int, default=16, help="windows timed per (reader, data)")
    parser.add_argument("--passes", nargs="+", default=list(PASSES), choices=list(PASSES),
                        help="run only these passes (default: all). With 'candidates' and 'other' the table is "
                             "printed; without 'timing' its cost column is left empty")
    parser.add_argument("--plot-only", action="store_true", help="redraw the chart from the CSV")
    parser.add_argument("--from-records", action="store_true",
                        help="compute nothing: print the table from the records under --runs-dir, which must be "
                             "complete. The predictive rows come from the reranker whose choices are recorded (its "
                             "weights' sha256 is printed), so a fresh clone needs no reranker folder")
    args = parser.parse_args(argv)
    if args.from_records and (args.predictive or args.predictive_no_passage):
        parser.error("--from-records reads the predictive rows from the records: leave out --predictive and "
                     "--predictive-no-passage (or leave out --from-records to check or compute them)")
    return args


PREDICTIVE = {"predictive": "predictive", "predictive + no-passage candidate": "predictive-no-passage"}
"""The predictive rows' names and their passes' folders."""


def require_records(args, folder: Path, needed: int, what: str) -> None:
    """With ``--from-records``, stop unless ``folder`` holds its first ``needed`` records: nothing is computed."""
    from hf_ralm import RecordStore

    if args.from_records and (held := RecordStore.prefix_length(folder)) < needed:
        sys.exit(f"--from-records: {folder} holds {held} of the {needed} records of "
                 f"{what}. Run without --from-records (a predictive pass: with its reranker's folder) to compute the "
                 "rest.")


def pass_dir(args, reader: str, data: str, name: str) -> Path:
    return Path(args.runs_dir) / f"{reader}.{data.replace(' ', '_')}.{args.max_eval_tokens}" / name


def run_identity(run: Run, data: str, args) -> dict:
    """What a pass's records depend on besides the model: the text (name and token count), the retrieval (corpus
    fingerprint, forbidden titles) and the candidates' count."""
    from hf_ralm.retrieval import retriever_identity

    return {"data": data, "max_eval_tokens": args.max_eval_tokens, "k": K, **retriever_identity(run.retriever)}


def candidate_pass(run: Run, data: str, args) -> list:
    """Every window's k candidates and no passage, scored by the reader (resumable records)."""
    from hf_ralm import RunOptions
    from hf_ralm.selection import score_candidates

    require_records(args, pass_dir(args, run.reader, data, "candidates"), len(run.windows), "the candidates' pass")
    return score_candidates(run.model, run.tokenizer, run.ids, run.windows, run.candidates, config=run.config,
                            run=RunOptions(output_dir=pass_dir(args, run.reader, data, "candidates"), chunk_size=CHUNK,
                                           batch_size=args.batch_size),
                            settings=run_identity(run, data, args))


def choice_pass(run: Run, data: str, args, name: str, ranker_settings: dict, choose) -> list[int]:
    """Per window, the choice of a ranker that only chooses (``choose(windows) -> chosen``), saved every
    :data:`CHUNK` windows in ``name``'s folder and resumed from there."""
    from hf_ralm import RecordStore, model_identity
    from hf_ralm.utils import provenance

    settings = {**model_identity(run.model), **run_identity(run, data, args), **ranker_settings}
    require_records(args, pass_dir(args, run.reader, data, name), len(run.windows), f"the {name} pass")
    writer = RecordStore(pass_dir(args, run.reader, data, name), settings, chunk_size=CHUNK, reproduce=provenance())
    chosen = [row["chosen"] for row in writer.rows()]
    with writer:
        for start in range(len(chosen), len(run.windows), CHUNK):
            chunk = run.windows[start : start + CHUNK]
            picks = choose(chunk)
            writer.add([{"window": w.index, "chosen": c} for w, c in zip(chunk, picks)])
            chosen += picks
            print(f"[tables] {run.reader} / {data} / {name}: {len(chosen)} of {len(run.windows)} windows",
                  file=sys.stderr)
    return chosen


def other_model_choices(run: Run, data: str, args, other) -> list[int]:
    """The other LM ranks the reader's candidates in text (zero-shot, no no-passage choice)."""
    from hf_ralm import model_identity
    from hf_ralm.selection import rerank_windows

    config = run.config_for(rerank="lm")
    return choice_pass(run, data, args, f"other-{OTHER[run.reader]}", {"ranker": model_identity(other.model)},
                       lambda chunk: rerank_windows(run.model, run.tokenizer, run.ids, chunk, run.queries,
                                                    candidates=run.candidates, config=config, reranker=other,
                                                    batch_size=args.batch_size, show_progress=False).chosen)


def predictive_choices(run: Run, data: str, args, row: str, folder: str | None) -> list[int]:
    """A trained cross-encoder chooses among the candidates (for the row with the no-passage candidate, also the
    empty passage); with ``folder`` None (``--from-records``), the choices recorded for this pair, whichever
    reranker made them."""
    from hf_ralm import RecordStore
    from hf_ralm.reranker_training import file_fingerprint
    from hf_ralm.selection import PredictiveReranker, rerank_windows

    name, no_passage = PREDICTIVE[row], row.endswith("no-passage candidate")
    if folder is None:
        ranker = RecordStore.read_settings(pass_dir(args, run.reader, data, name))[0]["ranker"]
        print(f"[tables] {run.reader} / {data} / {name}: the choices recorded by the reranker whose weights have "
              f"sha256 {ranker}", file=sys.stderr)
        return choice_pass(run, data, args, name, {"ranker": ranker, "no_passage": no_passage}, None)
    config = run.config_for(rerank="predictive", reranker_model=folder, rerank_allow_no_passage=no_passage)
    reranker = PredictiveReranker(folder, device=str(run.model.device))
    weights = next(Path(folder).glob("model.safetensors"), None) or next(Path(folder).glob("*.bin"))
    return choice_pass(run, data, args, name, {"ranker": file_fingerprint(weights), "no_passage": no_passage},
                       lambda chunk: rerank_windows(run.model, run.tokenizer, run.ids, chunk, run.queries,
                                                    candidates=run.candidates, config=config, reranker=reranker,
                                                    show_progress=False).chosen)


def timing(run: Run, data: str, args, other, predictive: dict) -> dict[str, float]:
    """Seconds per window of each computation a strategy needs, measured side by side on the same windows (one
    record per computation, resumed)."""
    from hf_ralm import RecordStore, RunOptions, model_identity, score_windows, window_prefixes
    from hf_ralm.selection import PredictiveReranker, lm_gate_config, rerank_windows, score_candidates
    from hf_ralm.utils import provenance

    windows = [w for w in run.windows if w.has_retrieval][: args.timing_windows]
    # the scorer reads a window's prefix at its index: the windows before the timed ones get none
    top1 = [[]] * windows[0].index + window_prefixes(run.tokenizer, windows, run.candidates, run.config)
    empty = [[]] * len(top1)

    def ranks(config, reranker=None):
        return lambda: rerank_windows(run.model, run.tokenizer, run.ids, windows, run.queries,
                                      candidates=run.candidates,
                                      config=config, reranker=reranker, batch_size=args.batch_size, show_progress=False)

    computations = {
        "no passage": lambda: score_windows(run.model, run.ids, windows, empty, args.batch_size,
                                            show_progress=False),
        "one passage": lambda: score_windows(run.model, run.ids, windows, top1, args.batch_size,
                                             show_progress=False),
        "k+1 candidates": lambda: score_candidates(run.model, run.tokenizer, run.ids, windows, run.candidates,
                                                   config=run.config,
                                                   run=RunOptions(batch_size=args.batch_size, show_progress=False)),
        "lm gate": ranks(lm_gate_config(run.config_for(rerank="none", retrieval_gate="lm",
                                                       gate_threshold=GATE_MARGIN))),
        "other model ranks": ranks(run.config_for(rerank="lm"), other),
    }
    for name, folder in predictive.items():
        # the reranker is loaded when its ranking is timed: with --from-records (folder None) it never is
        computations[f"{name} ranks"] = lambda folder=folder, name=name: ranks(
            run.config_for(rerank="predictive", reranker_model=folder,
                           rerank_allow_no_passage=name.endswith("no-passage candidate")),
            PredictiveReranker(folder, device=str(run.model.device)))()
    settings = {**model_identity(run.model), **run_identity(run, data, args), "windows": len(windows)}
    require_records(args, pass_dir(args, run.reader, data, "timing"), len(computations), "the timing pass")
    writer = RecordStore(pass_dir(args, run.reader, data, "timing"), settings, chunk_size=1,
                         reproduce=provenance())
    measured = {row["computation"]: row["seconds_per_window"] for row in writer.rows()}
    with writer:
        for name, compute in computations.items():
            if name in measured:
                continue
            t0 = time.perf_counter()
            compute()
            measured[name] = (time.perf_counter() - t0) / len(windows)
            writer.add([{"computation": name, "seconds_per_window": measured[name]}])
    return measured


def table_rows(reader: str, data: str, config, scores: list, choices: dict[str, list[int]], cost: dict[str, float],
               num_tokens: int, num_words: int, windows: list) -> list[dict]:
    """Every strategy's perplexity from the candidate scores and the choices (see the module docstring): the library's
    strategies under ``config`` (the run's settings) with each row's own, and the choices recorded for the rankers
    that only choose; a strategy's cost is None while the timing pass has not measured it (``cost`` empty)."""
    from hf_ralm import RalmConfig
    from hf_ralm.selection import choose_from_scores

    def seconds(*computations):  # a strategy's computations, added up
        return sum(cost[c] for c in computations) if all(c in cost for c in computations) else None

    def policy(**settings):  # the choices of the run's settings with these changed
        return choose_from_scores(scores, RalmConfig(**{**config.to_dict(), **settings}))

    def recorded(chosen):  # -1 (none chosen) is the no-passage option
        return [c if s.passage_ids and c >= 0 else s.no_passage for s, c in zip(scores, chosen)]

    no_passage = {"rerank_allow_no_passage": True}
    picks = {
        "none": ([s.no_passage for s in scores], seconds("no passage")),
        "BM25 top-1": (policy(), seconds("one passage")),
        "random": (policy(rerank="random"), seconds("one passage")),
        "zero-shot": (policy(rerank="lm"), seconds("k+1 candidates")),
        "zero-shot + no-passage choice (0 nats)": (policy(rerank="lm", **no_passage), seconds("k+1 candidates")),
        "zero-shot + no-passage choice (2 nats)": (policy(rerank="lm", rerank_no_passage_margin=GATE_MARGIN,
                                                          **no_passage), seconds("k+1 candidates")),
        "lm gate (2 nats)": (policy(retrieval_gate="lm", gate_threshold=GATE_MARGIN), seconds("lm gate")),
        "oracle": (policy(rerank="oracle"), seconds("k+1 candidates")),
        "oracle + no-passage choice": (policy(rerank="oracle", **no_passage), seconds("k+1 candidates")),
        "zero-shot, other model reranks": (recorded(choices["other"]), seconds("other model ranks", "one passage")),
    }
    for name in ("predictive", "predictive + no-passage candidate"):
        if name in choices:
            picks[name] = (recorded(choices[name]), seconds(f"{name} ranks", "one passage"))
    rows = []
    ranked = [i for i, s in enumerate(scores) if s.passage_ids]
    top1 = [s.target_nlls[0] for s in scores]
    oracle = picks["oracle"][0]
    for strategy in STRATEGIES:
        if strategy not in picks:
            continue
        chosen, seconds = picks[strategy]
        nlls = [s.target_nlls[c] for s, c in zip(scores, chosen)]
        nll = sum(nlls)
        low, high = paired_interval(nlls, top1, windows, num_tokens)
        rows.append({"data": data, "reader": reader, "strategy": strategy,
                     "reranker": OTHER[reader] if strategy.startswith("zero-shot, other") else "",
                     **perplexities({"num_tokens": num_tokens, "num_words": num_words}, nll),
                     "vs_top1_low": low, "vs_top1_high": high,
                     "retrieved_fraction": sum(chosen[i] != scores[i].no_passage for i in ranked) / len(ranked),
                     "oracle_agreement": sum(chosen[i] == oracle[i] for i in ranked) / len(ranked),
                     "s_per_window": seconds, "windows": len(scores), "tokens": num_tokens})
    return rows


def paired_interval(nlls: list[float], top1: list[float], windows: list, num_tokens: int) -> tuple[float, float]:
    """The 95% paired interval of a strategy's token perplexity against top-1's, from their per-window NLL sums, as a
    relative change (-0.01: 1% lower perplexity): blocks of 8 consecutive windows resampled, the first window (no
    retrieval in either) counted in every resample (benchmarks/figures/intervals.py says why). The windows of one text
    are few (128 here) and the middle rows differ by about a percent: the interval says which of those differences
    the windows support."""
    import numpy as np

    from benchmarks.figures.intervals import BLOCK_WINDOWS, change_interval

    counts = np.array([w.num_scored for w in windows], dtype=np.float64)
    low, high = change_interval(np.asarray(nlls), np.asarray(top1), block=BLOCK_WINDOWS, counts=counts, fixed=1,
                                unscored=num_tokens - int(counts.sum()))
    return low / 100, high / 100


def ranking_signal(scores: list) -> float:
    """How well the reader's ranking NLL (the last s' prefix tokens) tells which passage helps the window: the mean
    :func:`~hf_ralm.selection.rules.rank_correlation` of the k passages' ranking and target NLLs over the windows
    with candidates."""
    from hf_ralm.selection import rank_correlation

    rhos = [rank_correlation(s.ranking_nlls[:-1], s.target_nlls[:-1]) for s in scores if s.passage_ids]
    return sum(rhos) / len(rhos)


def plot(rows: list[dict], path: str) -> None:
    """A dot plot per (reader, data): each strategy's token perplexity as its change against BM25 top-1, with the
    95% paired interval of that change (``vs_top1_low``/``vs_top1_high``; blocks of windows resampled). A change
    axis holds 0 (top-1 itself) by construction, so nothing is magnified by a cut axis, and the interval shows which
    differences the windows support."""
    from benchmarks.figures.plotting import pyplot

    plt = pyplot()

    groups = sorted({(r["reader"], r["data"]) for r in rows})
    strategies = [s for s in STRATEGIES if any(r["strategy"] == s for r in rows)]
    fig, axes = plt.subplots(1, len(groups), figsize=(3.9 * len(groups), 5.0), squeeze=False, sharey=True)
    for ax, (reader, data) in zip(axes[0], groups):
        mine = {r["strategy"]: r for r in rows if (r["reader"], r["data"]) == (reader, data)}
        top1 = float(mine["BM25 top-1"]["token_ppl"])
        for y, strategy in enumerate(strategies):
            if strategy not in mine:
                continue
            r = mine[strategy]
            change = 100 * (float(r["token_ppl"]) / top1 - 1)
            low, high = (100 * float(r[key]) if r[key] not in ("", None) else change
                         for key in ("vs_top1_low", "vs_top1_high"))
            ax.errorbar(change, y, xerr=[[change - low], [high - change]], fmt="o", color=COLORS[strategy],
                        capsize=3, markersize=5)
            ax.annotate(f"{float(r['token_ppl']):.2f}", (high, y), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=6.5)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_yticks(range(len(strategies)), strategies, fontsize=7)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(f"{reader}\n{data}", fontsize=9)
        ax.set_xlabel("token perplexity against BM25 top-1 (%)", fontsize=8)
    axes[0][0].invert_yaxis()  # the table's order, top down (the panels share the axis: inverted once)
    fig.suptitle(f"Reranking among k={K} BM25 candidates (L=512, s=4, ℓ=32, s'=16, bf16): change against top-1 with "
                 "its 95% interval (labels: token perplexity)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.figures_dir, exist_ok=True)
    csv_path = os.path.join(args.figures_dir, "rerank_results.csv")
    if args.plot_only:
        with open(csv_path, encoding="utf-8") as f:
            plot(list(csv.DictReader(f)), os.path.join(args.figures_dir, "rerank_results.png"))
        return 0
    retrievers = load_retrievers(args)
    given = {"predictive": args.predictive, "predictive + no-passage candidate": args.predictive_no_passage}
    rows, signals = [], {}
    for data in args.data:
        for reader in args.readers:
            from hf_ralm.selection import LMReranker

            run = Run(reader, data, args, retrievers, K, rerank_candidates=K, rerank_tokens=16)
            predictive = ({name: None for name, folder in PREDICTIVE.items()
                           if (pass_dir(args, reader, data, folder) / "settings.json").is_file()}
                          if args.from_records else {name: folder for name, folder in given.items() if folder})
            if "candidates" in args.passes:
                scores = candidate_pass(run, data, args)
            other = LMReranker(*load_reader(args.models_dir, OTHER[reader], "bfloat16", run.device), 512)
            choices, cost = {}, {}
            if "other" in args.passes:
                choices["other"] = other_model_choices(run, data, args, other)
            if "predictive" in args.passes:
                for name, folder in predictive.items():
                    choices[name] = predictive_choices(run, data, args, name, folder)
            if "timing" in args.passes:
                cost = timing(run, data, args, other, predictive)
            if {"candidates", "other"} <= set(args.passes):
                rows += table_rows(reader, data, run.config, scores, choices, cost, len(run.ids), run.num_words,
                                   run.windows)
                signals[(reader, data)] = ranking_signal(scores)
            del run, other
    if not rows:
        print(f"[tables] passes done: {', '.join(args.passes)}", file=sys.stderr)
        return 0

    tmp = csv_path + ".tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, csv_path)
    plot(rows, os.path.join(args.figures_dir, "rerank_results.png"))
    print("| data | reader | strategy | token ppl | word ppl | token ppl against top-1 (95% interval) "
          "| windows with a passage | = oracle's choice | s / window |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        name = r["strategy"] + (f" ({r['reranker']})" if r["reranker"] else "")
        print(f"| {r['data']} | {r['reader']} | {name} | {r['token_ppl']:.3f} | {r['word_ppl']:.3f} | "
              f"{_interval(r)} | {r['retrieved_fraction']:.1%} | "
              f"{r['oracle_agreement']:.1%} | {_seconds(r['s_per_window'])} |")
    print(f"\n(first {args.max_eval_tokens} tokens, L=512, s=4, ℓ=32, k={K}, s'=16, bfloat16; {csv_path})")
    for (reader, data), rho in signals.items():
        print(f"{reader} / {data}: ranking vs target NLL over the {K} passages, mean Spearman rho {rho:.3f}")
    return 0


def _interval(row: dict) -> str:
    if row["strategy"] == "BM25 top-1":
        return "—"
    return f"{row['vs_top1_low']:+.1%} to {row['vs_top1_high']:+.1%}"


def _seconds(value) -> str:
    return "" if value in (None, "") else f"{float(value):.2f}"


if __name__ == "__main__":
    sys.exit(main())
