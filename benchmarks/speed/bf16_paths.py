"""How far two exact paths drift apart in bfloat16: the library's evaluation (``evaluate_perplexity``, top passage
in every window: batched windows, the passage's keys and values computed once and reused) against the plain loop the
exactness tests hold it to (:func:`hf_ralm.testing.plain_window_nlls`: each window with the same passage written over
it, one full forward at batch 1). In float32 they agree to rounding (the tests); in bfloat16 the same arithmetic in
another order rounds differently. This prints, per (reader, data), both token perplexities and the per-window
difference of their NLL sums (mean, standard deviation, largest), which is what a figure measured before and after a
change of batching can differ by (benchmarks/tables/results_csv.py's ``REMEASURE_RTOL``). With ``--float32-too`` the
same weights are also compared in float32 (the bf16 weights, upcast), where the difference should be rounding alone.

Both readers, the first ``--max-eval-tokens`` tokens, L=512, s=4, l=32, BM25 over the whole sample (the gate table's
settings, benchmarks/tables/table_runs.py)::

    python benchmarks/speed/bf16_paths.py --max-eval-tokens 1024 --data "held-out Wikipedia"
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from benchmarks.bench_setup import READERS
from benchmarks.tables.table_runs import DATA, Run, add_run_args, load_retrievers


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(parser, "bf16-paths")
    parser.add_argument("--readers", nargs="+", choices=list(READERS), default=list(READERS))
    parser.add_argument("--data", nargs="+", choices=list(DATA), default=list(DATA))
    parser.add_argument("--float32-too", action="store_true", help="also compare the two paths in float32")
    return parser.parse_args(argv)


def compare(run: Run, batch_size: int) -> dict:
    """Both paths' token perplexity over the evaluated tokens and the per-window differences of their NLL sums."""
    from hf_ralm import evaluate_perplexity, perplexity_from_nll
    from hf_ralm.testing import plain_window_nlls

    result = evaluate_perplexity(run.model, run.tokenizer, run.ids, run.retriever, run.config, batch_size=batch_size,
                                 show_progress=False)
    in_context = dict(enumerate(result.in_context()))  # the plain loop gets the very passages the evaluation used
    plain = plain_window_nlls(run.model, run.tokenizer, run.ids, result.windows, in_context, config=run.config)
    scored = ~torch.isnan(result.token_nlls)
    diffs = [float((plain[w.score_begin : w.end] - result.token_nlls[w.score_begin : w.end]).double().sum())
             for w in result.windows]
    return {"library": result.figures["token_ppl"],  # both over the text's token count, as every table has it
            "plain": perplexity_from_nll(float(plain[scored].double().sum()), result.figures["num_tokens"]),
            "windows": len(diffs), "mean": statistics.fmean(diffs), "sd": statistics.pstdev(diffs),
            "largest": max(diffs, key=abs)}


def main(argv=None) -> int:
    args = parse_args(argv)
    retrievers = load_retrievers(args)
    print("| reader | data | dtype | library token ppl | plain loop | apart | per-window NLL difference: mean, sd, "
          "largest (nats) |")
    print("|---|---|---|---|---|---|---|")
    for reader in args.readers:
        for data in args.data:
            run = Run(reader, data, args, retrievers, 1)
            for dtype in ("bfloat16", "float32") if args.float32_too else ("bfloat16",):
                if dtype == "float32":
                    # upcast after the bf16 comparison; never .to(bfloat16) a loaded model: it would round its fp32
                    # buffers (the rotary inv_freq) too, which moves Gemma's perplexity by 0.5%
                    run.model.float()
                c = compare(run, args.batch_size)
                print(f"| {reader} | {data} | {dtype} | {c['library']:.4f} | {c['plain']:.4f} | "
                      f"{c['plain'] / c['library'] - 1:+.3%} | {c['mean']:+.4f}, {c['sd']:.4f}, {c['largest']:+.4f} "
                      f"over {c['windows']} windows |", flush=True)
    print(f"\n(first {args.max_eval_tokens} tokens, L=512, s=4, l=32, BM25 top passage in every window; plain loop: "
          "hf_ralm.testing.plain_window_nlls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
