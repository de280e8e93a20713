"""Gates, several passages and ensembles: perplexity against the share of windows that retrieved
(``retrieved_fraction``) for the score gate at several thresholds and the lm gate, with no retrieval and retrieval
in every window as the ends; and
perplexity with n ∈ {1, 2, 3} passages in context and with ensembles of n ∈ {2, 4, 8} passages at several
temperatures τ. SmolLM2-135M and Gemma-3-270M (Gemma with a BOS in every window), WikiText-103 test and held-out
Wikipedia, L=512, s=4, ℓ=32, s'=16, BM25 over the whole Wikipedia sample, bfloat16 (benchmarks/tables/table_runs.py).

How it is computed: one pass of the reader per (reader, data) runs every window with its top passage and without
(``rerank_windows`` under ``lm_gate_config``: the lm gate's own computation), which gives each window's ranking NLL (the
last s' prefix tokens) and target NLL both ways. Every gate is then a choice per window and its perplexity the sum of
the chosen target NLLs: none = without, always = with, lm t = the lm gate's choice at threshold t (with when the passage
saves >= t nats of ranking NLL; t=0: ranking NLL with <= without), score t = with when the top passage's BM25 score over
its query's maximum attainable score is >= t (``normalized_top_scores``): the library's gates
(:mod:`hf_ralm.selection.strategies`), choosing from the pass (``choose_from_scores``). Several passages run
``evaluate_perplexity`` with ``num_passages=n`` (capped at ``--max-context-doc-tokens``, 384 by default: the window must
hold them and a stride); n=1 is measured that way too (the cap does not bind: one passage is at most 256 tokens), and
its difference from ``always`` (the same windows, from the pass) is printed as a check. Ensembles come from one more
pass per (reader, data): every window's NLLs under each of its top 8 passages (``ensemble_member_nlls``), mixed for each
n and each τ of ``--ensemble-temperature`` (``mix_window_nlls`` of the first n: what ``evaluate_perplexity`` with
``ensemble_size=n`` gives, as tests/test_passages.py checks; τ=inf weighs the n passages equally).

Every point also gets its change against no retrieval with a paired 95% interval (``vs_none``, ``vs_none_low``,
``vs_none_high``): the same windows under the point's choice and without a passage, blocks of 8 windows resampled
2,000 times (benchmarks/figures/intervals.py says why blocks); the figure draws it as error bars around each point
(on the scale of the text's perplexity without retrieval). Rows of an older CSV have none: ``--fill-intervals``
measures their points again and fills it in, keeping what the row measured once its token perplexity is found again;
one that differs by at most 1% (results_csv's ``REMEASURE_RTOL``: bfloat16's arithmetic order moves these perplexities)
is measured anew instead, and one further apart refused.

Every point is one row of ``--figures-dir/gate_results.csv``, written as soon as it is measured (``seconds``: the
time of the pass it comes from, or of its evaluation; benchmarks/tables/results_csv.py); a rerun skips the points
already there (each pass is kept in a record store, :mod:`hf_ralm.runs.store`, under ``--out``). Then the table is
printed and ``gate_results.png`` drawn (matplotlib, the ``bench`` extra)::

    python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \\
        --out-dir ~/.cache/hf-ralm/heldout
    python benchmarks/tables/gate_tables.py --max-eval-tokens 2048

A smoke run: ``--max-eval-tokens 600 --figures-dir /tmp/gates --out /tmp/gates/passes``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

from benchmarks.bench_setup import READERS
from benchmarks.figures.intervals import BLOCK_WINDOWS, change_interval
from benchmarks.tables.results_csv import REFILL_RTOL, REMEASURE_RTOL, Table, fill_in, run_points
from benchmarks.tables.table_runs import (
    DATA,
    Run,
    add_run_args,
    cached,
    chosen_nll,
    chosen_units,
    load_retrievers,
    perplexities,
    reader_pass,
)
from hf_ralm import RecordStore
from hf_ralm.cli import add_ralm_arguments

TEMPERATURES = (1.0, 4.0, 16.0, float("inf"))  # BM25 scores differ by units: τ=1 is nearly the top passage alone
THRESHOLDS = (0.15, 0.2, 0.225, 0.25, 0.275, 0.3, 0.35, 0.4)  # meant to span the windows' normalised top scores
LM_THRESHOLDS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)  # nats saved on the s'=16 ranking tokens: 0 is the plain lm gate
PASSAGES = (1, 2, 3)
ENSEMBLES = (2, 4, 8)
SETTINGS = ("data", "reader", "method", "setting", "options", "tokens")  # a point's key in the CSV
MEASURES = ("token_ppl", "word_ppl", "retrieved_fraction", "windows", "seconds", "vs_none", "vs_none_low",
            "vs_none_high")
CHANGE = ("vs_none", "vs_none_low", "vs_none_high")  # added after the first CSV was measured: empty in its rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(parser, "gate-tables")
    parser.add_argument("--thresholds", type=float, nargs="+", default=list(THRESHOLDS),
                        help="the score gate's thresholds (default: %(default)s)")
    parser.add_argument("--lm-thresholds", type=float, nargs="+", default=list(LM_THRESHOLDS),
                        help="the lm gate's thresholds, nats saved on the ranking tokens (default: %(default)s)")
    # τ: each measured from the same pass; the cap: a quarter of the L=512 window stays the text's (at most 508: L
    # must hold the passages and a stride)
    add_ralm_arguments(parser, settings=("max_context_doc_tokens", "ensemble_temperature"),
                       defaults={"ensemble_temperature": list(TEMPERATURES), "max_context_doc_tokens": 384},
                       sweeps=("ensemble_temperature",))
    parser.add_argument("--readers", nargs="+", choices=list(READERS), default=list(READERS),
                        help="measure only these readers (default: both)")
    parser.add_argument("--data", nargs="+", choices=list(DATA), default=list(DATA),
                        help="measure only these data sets (default: both)")
    parser.add_argument("--fill-intervals", action="store_true",
                        help="measure again the points whose row has no interval (an older CSV) and fill it in")
    return parser.parse_args(argv)


def points(args) -> list[tuple[str, str, str]]:
    """Every (method, setting, options) measured per (reader, data), in the table's order; ``options`` are the
    settings besides n that a point depends on (part of its key: a rerun with others measures it again)."""
    return ([("none", "", ""), ("always", "", "")]
            + [("lm gate", str(t), "") for t in args.lm_thresholds]
            + [("score gate", str(t), "") for t in args.thresholds]
            + [("passages", str(n), f"cap={args.max_context_doc_tokens}") for n in PASSAGES]
            + [("ensemble", str(n), f"tau={tau}") for tau in args.ensemble_temperature for n in ENSEMBLES])


def gate_pass(run: Run, batch_size: int) -> dict:
    """Every window's ranking and target NLL with its top passage and without, and its normalised top score."""
    from hf_ralm.selection import lm_gate_config, normalized_top_scores

    p = reader_pass(run, batch_size, lm_gate_config(run.config))
    p["gate_scores"] = normalized_top_scores(run.retriever, run.queries, run.candidates)
    return p


GATES = {"none": None, "always": "always", "lm gate": "lm", "score gate": "score"}
"""The library's gate (``retrieval_gate``) of each method, with the point's threshold; none: no passage."""


def pass_units(p: dict, per_window: list[float]) -> np.ndarray:
    """A per-window quantity grouped into the units of the gate pass ``p`` (:func:`chosen_units`: the windows
    nothing was ranked for together, then each ranked window)."""
    ranked = [targets is not None for targets in p["targets"]]
    return np.array([sum(v for v, r in zip(per_window, ranked) if not r),
                     *(v for v, r in zip(per_window, ranked) if r)], dtype=np.float64)


def unit_counts(run: Run, p: dict) -> np.ndarray:
    """The scored tokens of each unit of the gate pass ``p``."""
    return pass_units(p, [w.num_scored for w in run.windows])


def token_units(run: Run, p: dict, token_nlls: torch.Tensor) -> np.ndarray:
    """Per-token NLLs (NaN for token 0) summed into the units of the gate pass ``p``, for pairing with it."""
    return pass_units(p, [float(token_nlls[w.score_begin : w.end].double().sum()) for w in run.windows])


def gate_point(run: Run, p: dict, method: str, setting: str) -> tuple[dict, np.ndarray]:
    """A gate's (or one passage's) retrieved fraction and perplexity from the pass: candidate 0 is the top passage,
    1 no passage, and the choice the library's gate's under the point's settings, read from the pass
    (:func:`hf_ralm.selection.candidates.choose_from_scores`; the score gate normalises with the run's retriever); and
    the NLL sum of each of the pass's units under that choice."""
    from hf_ralm.selection import CandidateScores, choose_from_scores

    ranked = [i for i, targets in enumerate(p["targets"]) if targets is not None]
    gate = GATES[method]
    if gate is None:
        chosen = [1] * len(ranked)
    else:
        top = [run.candidates[i][0] for i in ranked]
        scores = [CandidateScores(i, [passage.id], [passage.score], p["ranking"][i], p["targets"][i])
                  for i, passage in zip(ranked, top)]
        threshold = {"gate_threshold": float(setting)} if setting else {}
        chosen = choose_from_scores(scores, run.config_for(retrieval_gate=gate, **threshold), retriever=run.retriever,
                                    queries=run.queries)
    picks = dict(zip(ranked, chosen))
    later = p["num_windows"] - 1
    retrieved = sum(1 for choice in chosen if choice == 0)

    def pick(i, ranking, targets):
        return picks[i]

    return ({**perplexities(p, chosen_nll(p, pick)), "retrieved_fraction": retrieved / later if later else None,
             "seconds": p["seconds"]}, np.array(chosen_units(p, pick)))


def passages_point(run: Run, n: int, args, gates: dict) -> tuple[dict, np.ndarray]:
    """``evaluate_perplexity`` with n passages in context, and its NLL sums in the units of the gate pass ``gates``."""
    from hf_ralm import RalmConfig, evaluate_perplexity

    config = RalmConfig(**{**run.config.to_dict(), "num_passages": n,
                           "max_context_doc_tokens": args.max_context_doc_tokens})
    t0 = time.perf_counter()
    result = evaluate_perplexity(run.model, run.tokenizer, run.ids, run.retriever, config,
                                 batch_size=args.batch_size, show_progress=False)
    figures = result.figures
    return ({"token_ppl": figures["token_ppl"], "word_ppl": figures["word_ppl"],
             "retrieved_fraction": figures["retrieved_fraction"], "seconds": time.perf_counter() - t0},
            token_units(run, gates, result.token_nlls))


def ensemble_pass(run: Run, batch_size: int) -> dict:
    """Every window's top ``max(ENSEMBLES)`` passages' retrieval scores and the window's NLLs under each."""
    from hf_ralm import RalmConfig, ensemble_member_nlls

    config = RalmConfig(**{**run.config.to_dict(), "ensemble_size": max(ENSEMBLES)})
    passages = run.plan.candidates(run.windows, max(ENSEMBLES))
    t0 = time.perf_counter()
    members, rows = ensemble_member_nlls(run.model, run.tokenizer, run.ids, run.windows, passages, config=config,
                                         batch_size=batch_size)
    return {"seconds": time.perf_counter() - t0, "scores": [[p.score for p in found] for found in members],
            "rows": [[row.tolist() for row in window_rows] for window_rows in rows],
            "num_tokens": len(run.ids), "num_words": run.num_words}


def ensemble_point(run: Run, p: dict, n: int, temperature: float, gates: dict) -> tuple[dict, np.ndarray]:
    """The ensemble of each window's top n at ``temperature``, from the pass (``mix_window_nlls`` of its first n),
    and its NLL sums in the units of the gate pass ``gates``."""
    from hf_ralm import mix_window_nlls
    from hf_ralm.selection import retrieved_fraction

    scores = [window_scores[:n] for window_scores in p["scores"]]
    rows = [[torch.tensor(row, dtype=torch.float64) for row in window_rows] for window_rows in p["rows"]]
    nll = mix_window_nlls(run.windows, scores, rows, p["num_tokens"], temperature)
    return ({**perplexities(p, float(nll[1:].sum())), "seconds": p["seconds"],
             "retrieved_fraction": retrieved_fraction(run.windows, scores, [0] * len(run.windows))},
            token_units(run, gates, nll))


def _declutter(ax, points: list[tuple[float, float, str]], color: str, placed: list) -> None:
    """Label each point with its setting, except where the label would sit on one already placed (``placed``, in
    axes fractions): the thresholds of a gate crowd where few windows retrieve."""
    for x, y, setting in points:
        fx, fy = ax.transLimits.transform((x, y))
        if all(abs(fx - px) > 0.07 or abs(fy - py) > 0.05 for px, py in placed):
            ax.annotate(setting, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points", color=color)
            placed.append((fx, fy))


def _error_bars(ax, rows: list[dict], xs: list[float], color: str) -> None:
    """Each row's paired 95% interval against no retrieval, drawn around its perplexity (on the perplexity scale of
    the same text's run without retrieval); rows without one get no bar."""
    from benchmarks.figures.plotting import error_bars

    bounds = []
    for row in rows:
        if row["vs_none_low"]:
            none = float(row["token_ppl"]) / (1 + float(row["vs_none"]) / 100)
            bounds.append(tuple(none * (1 + float(row[c]) / 100) for c in ("vs_none_low", "vs_none_high")))
        else:
            bounds.append(None)
    error_bars(ax, xs, [float(row["token_ppl"]) for row in rows], bounds, color)


def plot(rows: list[dict], path: str) -> None:
    from benchmarks.figures.plotting import mark_cut_axes, pyplot

    plt = pyplot()

    groups = sorted({(r["reader"], r["data"]) for r in rows})
    fig, axes = plt.subplots(2, len(groups), figsize=(4.4 * len(groups), 8.4), squeeze=False)
    for column, (reader, data) in enumerate(groups):
        mine = [r for r in rows if (r["reader"], r["data"]) == (reader, data)]

        def rows_of(method):
            return sorted((r for r in mine if r["method"] == method), key=lambda r: float(r["retrieved_fraction"] or 0))

        def of(method):
            return [(float(r["retrieved_fraction"] or 0), float(r["token_ppl"]), r["setting"]) for r in rows_of(method)]

        ax = axes[0][column]
        gates = (("score gate (threshold)", "score gate", "o-", "#4c72b0"),
                 ("lm gate (δ nats)", "lm gate", "*-", "#55a868"))
        for label, method, style, color in gates:
            gate = of(method)
            ax.plot([x for x, _, _ in gate], [y for _, y, _ in gate], style, color=color, label=label)
            _error_bars(ax, rows_of(method), [x for x, _, _ in gate], color)
        for method, marker, color in (("none", "s", "#999999"), ("always", "D", "#c44e52")):
            for x, y, _ in of(method):
                ax.plot([x], [y], marker, color=color, markersize=9, label=method)
            _error_bars(ax, rows_of(method), [x for x, _, _ in of(method)], color)
        ax.margins(x=0.06, y=0.12)  # no point on the frame
        fig.canvas.draw()  # the limits the labels are placed against
        placed: list = []
        for _, method, _, color in gates:
            _declutter(ax, of(method), color, placed)
        ax.set_xlabel("windows with a passage in context")
        ax.set_ylabel("token perplexity")
        ax.set_title(f"{reader}\n{data}", fontsize=9)
        ax = axes[1][column]
        series = [("passages", "", "n passages in context", "#dd8452")] + [
            ("ensemble", options, f"ensemble of n, τ={options.removeprefix('tau=')}", color)
            for options, color in zip(sorted({r["options"] for r in mine if r["method"] == "ensemble"},
                                             key=lambda o: float(o.removeprefix("tau="))),
                                      ("#8172b2", "#64b5cd", "#937860", "#da8bc3", "#8c8c8c"))]
        for method, options, label, color in series:
            line = sorted((r for r in mine if r["method"] == method and (not options or r["options"] == options)),
                          key=lambda r: int(r["setting"]))
            ax.plot([int(r["setting"]) for r in line], [float(r["token_ppl"]) for r in line], "o-", color=color,
                    label=label)
            _error_bars(ax, line, [int(r["setting"]) for r in line], color)
        for x, y, _ in of("always"):
            ax.axhline(y, color="#c44e52", linestyle=":", linewidth=1, label="top passage (always)")
        for x, y, _ in of("none"):
            ax.axhline(y, color="#999999", linestyle=":", linewidth=1, label="no retrieval")
        ax.set_xscale("log", base=2)
        ax.margins(y=0.08)
        ax.set_xlabel("n passages")
        ax.set_ylabel("token perplexity")
    mark_cut_axes(fig)
    fig.tight_layout(rect=(0, 0.04, 1, 1), h_pad=5.0)
    # one legend per row, under its x labels, instead of one over each panel's data
    for row in (0, 1):
        handles, labels = axes[row][0].get_legend_handles_labels()
        below = axes[row][0].get_position().y0 - 0.085
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, below), ncol=len(labels), fontsize=8,
                   frameon=False)
    fig.savefig(path, dpi=130)


def pass_path(args, reader: str, data: str, kind: str = "gates") -> str:
    """The record store of the gate (or ensemble) pass of (reader, data)."""
    return os.path.join(args.out, f"{reader}.{data}.{args.max_eval_tokens}.{kind}".replace(" ", "_"))


def measure(args, table: Table):
    """What a point of the CSV measures, as a function of the point: the retrievers are loaded for the first point
    measured, and one reader at a time (with its text's windows and retrieved passages). Each point gets its change
    against no retrieval with a paired 95% interval (blocks of ``BLOCK_WINDOWS`` windows resampled,
    benchmarks/figures/intervals.py); a point whose row has none yet (``--fill-intervals``) keeps that row and gains
    only those, once its token perplexity is found again (:func:`benchmarks.tables.results_csv.fill_in`)."""
    retrievers: dict = {}
    runs: dict = {}
    passes: dict = {}  # the current run's passes, read from their record stores once

    def measure_point(point: dict) -> dict:
        reader, data, method, setting = point["reader"], point["data"], point["method"], point["setting"]
        if not retrievers:
            retrievers.update(load_retrievers(args))
        if (reader, data) not in runs:
            runs.clear()  # one model in memory at a time
            passes.clear()
            runs[reader, data] = Run(reader, data, args, retrievers, 1)
        run = runs[reader, data]

        def the_pass(kind: str, compute) -> dict:
            if kind not in passes:
                path = pass_path(args, reader, data, kind)
                passes[kind] = cached(path, run, kind, lambda: compute(run, args.batch_size))
            return passes[kind]

        # every point is paired with no retrieval in the gate pass's units: that pass comes first
        gates = the_pass("gates", gate_pass)
        if method == "passages":
            measured, units = passages_point(run, int(setting), args, gates)
        elif method == "ensemble":
            ensembles = the_pass("ensembles", ensemble_pass)
            measured, units = ensemble_point(run, ensembles, int(setting),
                                             float(point["options"].removeprefix("tau=")), gates)
        else:
            measured, units = gate_point(run, gates, method, setting)
        none = np.array(chosen_units(gates, lambda i, ranking, targets: 1))
        counts = unit_counts(run, gates)
        low, high = change_interval(units, none, block=BLOCK_WINDOWS, counts=counts, fixed=1,
                                    unscored=gates["num_tokens"] - int(counts.sum()))
        vs_none = 100 * (measured["token_ppl"] / perplexities(gates, float(none.sum()))["token_ppl"] - 1)
        row = {**measured, "windows": len(run.windows), "vs_none": vs_none, "vs_none_low": low, "vs_none_high": high}
        old = table.row(point)
        return row if old is None else fill_in(old, row, CHANGE, "token_ppl", REFILL_RTOL, REMEASURE_RTOL)

    return measure_point


def print_checks(args, rows: list[dict]) -> None:
    """Per (reader, data): one passage evaluated against ``always`` from the pass, and the spread of the windows'
    normalised top scores (what the thresholds should span)."""
    for data in args.data:
        for reader in args.readers:
            ppl = {(r["method"], r["setting"]): float(r["token_ppl"]) for r in rows
                   if (r["data"], r["reader"]) == (data, reader)}
            if ("always", "") in ppl and ("passages", "1") in ppl:
                check = abs(ppl["passages", "1"] - ppl["always", ""]) / ppl["always", ""]
                print(f"[gates] {reader} / {data}: one passage evaluated vs always from the pass: relative "
                      f"perplexity difference {check:.1e}", file=sys.stderr)
            saved, scores = RecordStore.read_rows(pass_path(args, reader, data)), []
            if saved:
                scores = [s for s in saved[0]["gate_scores"] if s is not None]
            if scores:
                low, median, high = torch.quantile(torch.tensor(scores, dtype=torch.float64),
                                                   torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64))
                print(f"[gates] {reader} / {data}: the windows' normalised top BM25 scores: 5th/50th/95th percentile "
                      f"{low:.3f} / {median:.3f} / {high:.3f}", file=sys.stderr)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.figures_dir, exist_ok=True)
    table = Table(os.path.join(args.figures_dir, "gate_results.csv"), SETTINGS, MEASURES, optional=CHANGE)
    todo = [{"data": data, "reader": reader, "method": method, "setting": setting, "options": options,
             "tokens": args.max_eval_tokens}
            for data in args.data for reader in args.readers for method, setting, options in points(args)]
    run_points(table, todo, measure(args, table), "gates",
               redo=(lambda row: not row["vs_none_low"]) if args.fill_intervals else None)
    order = {point: i for i, point in enumerate(points(args))}
    rows = sorted((r for r in table.read() if r["tokens"] == str(args.max_eval_tokens)
                   and (r["method"], r["setting"], r["options"]) in order),
                  key=lambda r: (r["data"], r["reader"], order[r["method"], r["setting"], r["options"]]))
    print_checks(args, rows)
    plot(rows, os.path.join(args.figures_dir, "gate_results.png"))
    print("| data | reader | method | setting | retrieved | token ppl | word ppl | against none (95% CI) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        fraction = f"{float(r['retrieved_fraction']):.2f}" if r["retrieved_fraction"] else "—"
        setting = " ".join(filter(None, (r["setting"], r["options"])))
        print(f"| {r['data']} | {r['reader']} | {r['method']} | {setting} | {fraction} | "
              f"{float(r['token_ppl']):.3f} | {float(r['word_ppl']):.3f} | {_change(r)} |")
    cap = args.max_context_doc_tokens
    print(f"\n(first {args.max_eval_tokens} tokens, L=512, s=4, ℓ=32, s'=16, BM25, bfloat16, ensembles' τ "
          f"{args.ensemble_temperature}, several passages capped at {cap} tokens; {table.path})")
    return 0


def _change(row: dict) -> str:
    if not row["vs_none_low"]:
        return "—"
    return (f"{float(row['vs_none']):+.2f}% ({float(row['vs_none_low']):+.2f} to "
            f"{float(row['vs_none_high']):+.2f})")


if __name__ == "__main__":
    sys.exit(main())
