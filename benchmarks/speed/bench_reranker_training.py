"""What the predictive reranker's training gains from forwards over pairs of similar length, from bfloat16 mixed
precision and from leaving out dropout on the attention probabilities, measured side by side.

The same training (``hf_ralm.reranker_training.train_reranker`` from all-MiniLM-L6-v2, Eq. 9 over each window's
passages, the first ``--windows`` training windows of the rerank data, batch 8: 136 (prefix, passage) pairs a step at
k=16) runs four times: in float32 with all of a step's pairs in one padded forward (the cross-encoder's plain way), in
float32 with the pairs in forwards of 32 grouped by length (``PredictiveRerankLoss.pairs_per_forward``, the default),
the same with ``bf16=True``, and that with ``attention_dropout=0`` (all-MiniLM-L6-v2's own is 0.1, which PyTorch's fused
CPU attention kernels do not take). ``--variants`` runs some of them. Each runs in its own process so that each reports
its own peak memory. Printed per variant: seconds per training step (evaluation excluded), seconds per held-out window
of an evaluation (in float32, as training evaluates), the process's resident memory once the texts are loaded and its
peak, and the held-out figures after training (Eq. 9 loss, mean target NLL of the choice), so that speed is not bought
with quality::

    python -m benchmarks.speed.bench_reranker_training --windows 32
    python -m benchmarks.speed.bench_reranker_training --windows 256 --variants 2 3  # quality after 32 steps, bf16
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from pathlib import Path

from benchmarks.bench_common import resident_bytes
from benchmarks.bench_setup import CACHE, RESULTS

VARIANTS = {  # name: (bf16, pairs per forward (None: all of a step's pairs in one forward), attention dropout)
    "float32, one padded forward": (False, None, None),
    "float32, length groups": (False, 32, None),
    "bf16, length groups": (True, 32, None),
    "bf16, length groups, no attention dropout": (True, 32, 0.0),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(RESULTS / "rerank-data-smollm2"))
    parser.add_argument("--windows", type=int, default=32, help="training windows (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--records", type=int,
                        help="the data's first N records (default: those that stay the first ones, all there now): "
                             "runs that name the same N train and evaluate on the same windows")
    parser.add_argument("--variants", type=int, nargs="+", default=list(range(len(VARIANTS))),
                        help="which variants to run, by their position in the table (default: all)")
    parser.add_argument("--out", default=str(CACHE / "bench-reranker-training"), help="where the models go")
    return parser.parse_args(argv)


def train_variant(args: argparse.Namespace, variant: str, queue) -> None:
    """One training in this (child) process; puts its figures on ``queue``."""
    import torch

    from hf_ralm.reranker_training import (
        CURVE_FILE,
        PredictiveRerankLoss,
        load_rerank_data,
        train_reranker,
        training_steps,
    )

    bf16, per_forward, attention_dropout = VARIANTS[variant]
    PredictiveRerankLoss.pairs_per_forward = per_forward or 10**9
    dataset, metadata = load_rerank_data(args.data)
    dataset = dataset.select(range(args.records))  # what the data held when the run began, for every variant
    loaded = resident_bytes()["now"] / 2**20
    output_dir = f"{args.out}/{list(VARIANTS).index(variant)}"
    results = train_reranker(dataset, output_dir=output_dir, metadata=metadata,
                             max_train_windows=args.windows, batch_size=args.batch_size,
                             learning_rate=args.learning_rate, bf16=bf16,
                             attention_dropout=attention_dropout, eval_points=1, show_progress=False)
    steps = training_steps(results["train_windows"], args.batch_size, 1.0)
    curve = json.loads((Path(output_dir) / CURVE_FILE).read_text(encoding="utf-8"))
    queue.put({"variant": variant, "threads": torch.get_num_threads(), "steps": steps,
               "s_per_step": results["train_seconds"] / steps, "rss_loaded_mb": loaded,
               "eval_s_per_window": curve[-1]["eval_seconds"] / results["eval_windows"],
               "rss_peak_mb": resident_bytes()["peak"] / 2**20, **{k: results[k] for k in (
                   "train_windows", "eval_windows", "eval_loss_init", "eval_loss", "nll_reranker",
                   "nll_retrieval_top1", "oracle_agreement")}})


def main(argv=None) -> int:
    from hf_ralm.reranker_training import RerankDataWriter

    args = parse_args(argv)
    # a collection may be adding chunks to the data meanwhile, a sharded one out of order: every variant trains and
    # evaluates on the records that stay the first ones
    available = RerankDataWriter.prefix_length(args.data)
    if (args.records or 0) > available:
        raise SystemExit(f"--records {args.records}: the data holds its first {available} records without a gap")
    args.records = args.records or available
    context = multiprocessing.get_context("spawn")  # a fresh process per variant: its own peak memory
    rows = []
    for variant in [list(VARIANTS)[i] for i in args.variants]:
        queue = context.Queue()
        child = context.Process(target=train_variant, args=(args, variant, queue))
        child.start()
        rows.append(queue.get())
        child.join()
        if child.exitcode:
            raise SystemExit(f"the {variant} training failed (exit code {child.exitcode})")
        print(f"[bench] {json.dumps(rows[-1])}", file=sys.stderr)
    base = rows[0]["s_per_step"]
    print(f"{rows[0]['train_windows']} training windows ({rows[0]['steps']} steps of {args.batch_size} windows, "
          f"learning rate {args.learning_rate}), {rows[0]['eval_windows']} held-out windows of the first "
          f"{args.records} records, {rows[0]['threads']} threads\n")
    print("| variant | s / step | speed-up | held-out s / window | RSS with texts (MB) | peak RSS (MB) | "
          "held-out loss (before → after) | NLL of the choice | NLL top-1 | = oracle |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['s_per_step']:.2f} | {base / r['s_per_step']:.2f}× | "
              f"{r['eval_s_per_window']:.2f} | {r['rss_loaded_mb']:.0f} | "
              f"{r['rss_peak_mb']:.0f} | {r['eval_loss_init']:.4f} → {r['eval_loss']:.4f} | "
              f"{r['nll_reranker']:.4f} | {r['nll_retrieval_top1']:.4f} | {r['oracle_agreement']:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
