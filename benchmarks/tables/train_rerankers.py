"""The predictive reranker (the paper's §6.2) trained for real on the collected data, and what training buys.

For each variant (``passages``: Eq. 9 over the k=16 passages; ``no-passage``: the empty passage as a 17th candidate,
a learned retrieval gate) and each training size (the first N windows of the training articles), train a
cross-encoder from all-MiniLM-L6-v2 (``hf-ralm train-reranker``) on the rerank data in ``--data`` (its texts read back
from the articles, the index and the tokenizer the collection recorded). Every model is evaluated on the same
held-out windows (the articles whose id hashes into the held-out tenth): how often it picks the oracle's choice, the
mean target NLL of its choice against retrieval's top-1 and the oracle, its training time and its learning curve.

Each trained folder goes to ``--models-dir/<variant>-<size>`` (a cross-encoder folder with its model card: what
``--push-to-hub`` uploads); its figures and learning curve, with the data's summary, are kept as a small JSON record
under ``--runs-dir`` (committed), so a rerun skips what is done and the table and plots are drawn from the records::

    python benchmarks/tables/train_rerankers.py --sizes 1000 2000 4000 --records 4500 --bf16
    python benchmarks/tables/train_rerankers.py --plot-only

Outputs: ``--figures-dir/reranker_training.csv`` (one row per model), ``reranker_curves.png`` (held-out loss and NLL
against training steps) and ``reranker_data_size.png`` (held-out NLL against training windows, with top-1, no
passage and the oracle).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.bench_setup import CACHE, REPO, RESULTS

VARIANTS = {"passages": False, "no-passage": True}
WAIT_SECONDS = 300  # --wait: a chunk of the collection takes minutes


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(RESULTS / "rerank-data-smollm2"))
    parser.add_argument("--records", type=int,
                        help="use the data's first N records (default: all): every model then trains and is "
                             "evaluated on the same data however much the collection has added meanwhile")
    parser.add_argument("--runs-dir", default=str(RESULTS / "rerank-training"))
    parser.add_argument("--models-dir", default=str(CACHE / "rerankers"))
    parser.add_argument("--figures-dir", default=str(REPO / "docs" / "figures"))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-4,
                        help="default %(default)s: in two pilots on 1,000 windows (docs/results.md) the library's "
                             "2e-5 left the held-out loss unchanged to 4 decimals after 125 steps; this one moved it")
    parser.add_argument("--eval-every", type=int, default=100,
                        help="training steps between two points of the learning curve (each point evaluates all the "
                             "held-out windows in float32, about 6 minutes on one CPU core; the last step is always "
                             "one): 5 points for 4,000 windows in steps of 8, the final one only for 1,000 "
                             "(default: %(default)s)")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision (see bench_reranker_training)")
    parser.add_argument("--attention-dropout", type=float, default=0.0,
                        help="dropout on the attention probabilities while training (default %(default)s: faster on a "
                             "CPU, see bench_reranker_training; all-MiniLM-L6-v2's own is 0.1)")
    parser.add_argument("--wait", action="store_true",
                        help="with --records: wait until the collection has saved all of its first N records "
                             "(checking every 5 minutes) instead of stopping, so that the training starts by itself")
    parser.add_argument("--plot-only", action="store_true", help="draw the table and plots from the records")
    args = parser.parse_args(argv)
    if args.wait and args.records is None:
        parser.error("--wait waits for the first --records N records: give --records")
    return args


def training_windows(dataset) -> int:
    """How many windows of the data are on the training side of the held-out split."""
    from hf_ralm.reranker_training import split_by_article

    return split_by_article(dataset.select_columns(["article"]), 0.1)[0].num_rows


def train_one(args, variant: str, size: int, data, summary: dict) -> dict | None:
    """One model's record (trained now, or read back); ``None`` when the data has fewer training windows. ``data`` is
    ``(text rows, settings)``."""
    from hf_ralm.reranker_training import CURVE_FILE, train_reranker, training_steps
    from hf_ralm.utils import write_json_atomic

    record_path = Path(args.runs_dir) / f"{variant}-{size}.json"
    folder = Path(args.models_dir) / f"{variant}-{size}"
    if record_path.is_file():
        if not (folder / "model.safetensors").is_file():  # a fresh clone: the records came, the model did not
            print(f"[training] {variant}-{size}: its record is here, its model is not ({folder}); the record's figures "
                  f"stand. To train the model again, move {record_path} aside and rerun.", file=sys.stderr)
        return json.loads(record_path.read_text(encoding="utf-8"))
    if summary["training_windows"] < size:
        print(f"[training] {variant}: the data has {summary['training_windows']} training windows, fewer than "
              f"{size}: skipped", file=sys.stderr)
        return None
    steps = training_steps(size, args.batch_size, args.epochs)
    results = train_reranker(data[0], output_dir=folder, metadata=data[1], no_passage_candidate=VARIANTS[variant],
                             max_train_windows=size, epochs=args.epochs, batch_size=args.batch_size,
                             learning_rate=args.learning_rate, eval_points=max(1, round(steps / args.eval_every)),
                             bf16=args.bf16, attention_dropout=args.attention_dropout)
    record = {"variant": variant, "size": size, "results": results,
              "curve": json.loads((folder / CURVE_FILE).read_text(encoding="utf-8")),
              "data": summary,
              "settings": {k: getattr(args, k)
                           for k in ("epochs", "batch_size", "learning_rate", "bf16", "eval_every",
                                     "attention_dropout")},
              "model_dir": str(folder)}
    write_json_atomic(str(record_path), record)
    return record


def table(records: list[dict]) -> list[dict]:
    rows = []
    for r in records:
        res = r["results"]
        rows.append({"variant": r["variant"], "train_windows": res["train_windows"],
                     "train_articles": res["train_articles"], "eval_windows": res["eval_windows"],
                     "oracle_agreement": res["oracle_agreement"],
                     "retrieval_oracle_agreement": res["retrieval_oracle_agreement"],
                     "nll_reranker": res["nll_reranker"], "nll_retrieval_top1": res["nll_retrieval_top1"],
                     "nll_oracle": res["nll_oracle"], "nll_no_passage": res.get("nll_no_passage", ""),
                     "no_passage_chosen": res.get("no_passage_chosen", ""), "eval_loss_init": res["eval_loss_init"],
                     "eval_loss": res["eval_loss"], "train_minutes": res["train_seconds"] / 60})
    return rows


def plot(records: list[dict], figures_dir: str) -> None:
    from benchmarks.figures.plotting import pyplot

    plt = pyplot()

    colors = {"passages": "#dd8452", "no-passage": "#4c72b0"}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for r in sorted(records, key=lambda r: (r["variant"], r["size"])):
        steps = [0] + [p["step"] for p in r["curve"]]
        style = dict(color=colors[r["variant"]], alpha=0.4 + 0.6 * r["size"] / max(x["size"] for x in records))
        label = f"{r['variant']}, {r['results']['train_windows']} windows"
        axes[0].plot(steps, [r["results"]["eval_loss_init"]] + [p["eval_loss"] for p in r["curve"]],
                     marker=".", label=label, **style)
        axes[1].plot([p["step"] for p in r["curve"]], [p["eval_nll_reranker"] for p in r["curve"]], marker=".",
                     label=label, **style)
    axes[0].set(xlabel="training step (8 windows each)", ylabel="held-out Eq. 9 loss (nats)",
                title="Held-out loss")
    axes[1].set(xlabel="training step (8 windows each)", ylabel="mean target NLL of the choice (nats / window)",
                title="Held-out NLL of the reranker's choice")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(figures_dir, "reranker_curves.png"), dpi=130)

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for variant in sorted({r["variant"] for r in records}):
        points = sorted((r["results"]["train_windows"], r["results"]["nll_reranker"]) for r in records
                        if r["variant"] == variant)
        ax.plot(*zip(*points), marker="o", color=colors[variant], label=f"predictive ({variant})")
    last = max(records, key=lambda r: r["size"])["results"]
    # Every model has the same held-out windows, so a variant's references are the same at every size; its oracle
    # is the best of its own candidates (with no-passage: the passages and none).
    references = (("BM25 top-1", "nll_retrieval_top1", None, "#999999", "--"),
                  ("no passage", "nll_no_passage", "no-passage", "#64b5cd", "--"),
                  ("oracle (passages)", "nll_oracle", "passages", "#c44e52", "--"),
                  ("oracle (passages or none)", "nll_oracle", "no-passage", "#c44e52", ":"))
    for name, key, variant, color, style in references:
        value = next((r["results"][key] for r in records if variant in (None, r["variant"])), None)
        if value is not None:
            ax.axhline(value, color=color, ls=style, lw=1, label=name)
    ax.set(xscale="log", xlabel="training windows", ylabel="mean target NLL (nats / window)",
           title=f"Held-out windows ({last['eval_windows']}): the choice's NLL against data size")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(figures_dir, "reranker_data_size.png"), dpi=130)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.runs_dir, exist_ok=True)
    os.makedirs(args.figures_dir, exist_ok=True)
    if args.plot_only:
        records = [json.loads(p.read_text(encoding="utf-8")) for p in Path(args.runs_dir).glob("*.json")]
    else:
        from hf_ralm.reranker_training import RerankDataWriter, load_rerank_data, rerank_data_summary

        # the first N records, all of them: a sharded collection saves later chunks before earlier ones
        while args.records is not None and (available := RerankDataWriter.prefix_length(args.data)) < args.records:
            print(f"[training] the data holds its first {available} records without a gap, fewer than --records "
                  f"{args.records}: " + ("waiting for the collection" if args.wait else "let the collection go on"),
                  file=sys.stderr, flush=True)
            if not args.wait:
                return 1
            time.sleep(WAIT_SECONDS)
        dataset, settings = load_rerank_data(args.data)
        if args.records is not None:
            dataset = dataset.select(range(args.records))
        summary = {**rerank_data_summary(args.data, args.records), "training_windows": training_windows(dataset)}
        print(f"[training] data: {json.dumps(summary)}", file=sys.stderr)
        records = [r for variant in args.variants for size in sorted(args.sizes)
                   if (r := train_one(args, variant, size, (dataset, settings), summary)) is not None]
    records.sort(key=lambda r: (list(VARIANTS).index(r["variant"]), r["size"]))  # the same order however drawn
    rows = table(records)
    path = os.path.join(args.figures_dir, "reranker_training.csv")
    with open(path + ".tmp", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(path + ".tmp", path)
    plot(records, args.figures_dir)
    print("| variant | train windows | = oracle | top-1 = oracle | NLL choice | NLL top-1 | NLL none | NLL oracle "
          "| no passage chosen | minutes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        none = f"{r['nll_no_passage']:.3f}" if r["nll_no_passage"] != "" else "—"
        chosen = f"{r['no_passage_chosen']:.1%}" if r["no_passage_chosen"] != "" else "—"
        print(f"| {r['variant']} | {r['train_windows']} | {r['oracle_agreement']:.1%} | "
              f"{r['retrieval_oracle_agreement']:.1%} | {r['nll_reranker']:.3f} | {r['nll_retrieval_top1']:.3f} | "
              f"{none} | {r['nll_oracle']:.3f} | {chosen} | {r['train_minutes']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
