"""Speed benchmark of the scorer: the paper's reference loop against ``score_windows``, side by side in one run, on
the same windows and the same BM25 retrievals.

Variants (each gets one warm-up before it is timed with ``time.perf_counter`` under ``torch.inference_mode``):

1. ``reference_window_nlls``, float32: one window at a time, batch 1, logits for every position (the paper's
   ``eval_lm.py``);
2. ``score_windows``, float32, defaults: batching + logits only where a token is scored + shared passage keys/values;
3. ``score_windows``, float32, ``reuse_prefix_kv=False``: batching + scored-position logits only;
4. ``score_windows``, bfloat16 (a second copy of the model loaded with ``dtype=torch.bfloat16``), defaults;
5. on a CPU: ``score_windows``, bfloat16, its linear layers widened (a third copy, through
   ``hf_ralm.utils.widen_bfloat16_matmuls``: products in float32, rounded back to bfloat16), which hf-ralm's own
   loading does on a CPU without bfloat16 instructions.

It prints scored tokens/s, the speed-up over the reference, token perplexity and its difference from the reference
(float32 must match it, bfloat16 be within 0.5 %), then a markdown table with the command line, torch version,
threads and device. The exit status is 1 when a perplexity check fails.

Settings are the paper's tables: SmolLM2-135M, WikiText-103 test, BM25 over the Wikipedia sample (WikiText's own
articles excluded), max_length 512, stride 4, query length 32, passages cut to 256 tokens::

    python benchmarks/speed/bench_speed.py --json-out ~/.cache/hf-ralm/bench/speed.json

The default (first 1,024 tokens: 129 windows) takes a few minutes on 2 CPU cores; the reference alone needs about
0.4 s a window there. A quick smoke test: ``--max-eval-tokens 600 --max-length 128 --threads 1``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

import torch
from benchmarks.bench_common import available_cores, environment as run_environment, timed
from benchmarks.bench_setup import DEFAULT_SETTINGS, SHARED


HOME = Path.home()

FP32_MAX_REL_DIFF = 1e-4  # batching / KV reuse only reorder float32 sums
BF16_MAX_REL_DIFF = 5e-3  # 0.5 %


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from hf_ralm.cli import add_ralm_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(HOME / ".cache/hf-ralm/models/smollm2-135m-instruct"))
    parser.add_argument("--data", default=str(SHARED / "wikitext-103" / "test.jsonl"),
                        help="JSONL rows with a 'text' field, joined as the reference joins WikiText rows")
    parser.add_argument("--forbidden-titles", default=str(SHARED / "wikitext-103" / "forbidden_titles.txt"),
                        help="titles never to retrieve ('' for none)")
    parser.add_argument("--index-dir", default=str(HOME / ".cache/hf-ralm/index/wikipedia-2015-sample-bm25"))
    parser.add_argument("--max-eval-tokens", type=int, default=1024,
                        help="score the first T tokens (default 1024: 129 windows at max_length 512, stride 4)")
    add_ralm_arguments(parser, settings=("max_length", "retrieval_stride", "query_length", "max_doc_tokens"),
                       defaults=DEFAULT_SETTINGS)
    parser.add_argument("--batch-size", type=int, default=8, help="windows per forward of score_windows (default 8)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: every core this process may use)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--progress", action="store_true", help="show score_windows' progress bars")
    parser.add_argument("--json-out", help="write every figure to this JSON file (atomically)")
    args = parser.parse_args(argv)
    for name in ("max_eval_tokens", "max_length", "stride", "query_length", "max_doc_tokens", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    return args


def load_model(path: str, dtype: torch.dtype, device: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(device).eval()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([os.path.basename(sys.executable), *sys.argv]) if argv is None else shlex.join(argv)

    from hf_ralm import (
        RalmConfig,
        load_dataset_text,
        model_device,
        perplexity_figures,
        prepare,
        resolve_max_length,
        score_windows,
        window_prefixes,
    )
    from hf_ralm.retrieval import BM25Retriever, read_forbidden_titles
    from hf_ralm.testing import reference_window_nlls
    from hf_ralm.utils import widen_bfloat16_matmuls, write_json_atomic

    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    device_arg = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    # --- setup (not timed against anything) -------------------------------------------------------------------
    t0 = time.perf_counter()
    model32 = load_model(args.model, torch.float32, device_arg)
    model16 = load_model(args.model, torch.bfloat16, device_arg)
    widened16 = None
    if torch.device(device_arg).type == "cpu":
        widened16 = load_model(args.model, torch.bfloat16, device_arg)
        widen_bfloat16_matmuls(widened16)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    device = model_device(model32)  # the model's device drives everything below
    load_s = time.perf_counter() - t0

    config = RalmConfig(base_model_name_or_path=args.model, retrieval_stride=args.stride,
                        query_length=args.query_length, max_doc_tokens=args.max_doc_tokens,
                        max_length=args.max_length)
    config.validate()

    t0 = time.perf_counter()
    forbidden = read_forbidden_titles(args.forbidden_titles) if args.forbidden_titles else frozenset()
    retriever = BM25Retriever.load(args.index_dir, forbidden_titles=forbidden)
    index_load_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    max_length = resolve_max_length(model32, config.max_length)
    plan = prepare(load_dataset_text(args.data), tokenizer, config, retriever, max_length=max_length,
                   max_eval_tokens=args.max_eval_tokens)
    ids, windows = plan.ids, plan.windows
    tokenize_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    passages = plan.candidates(windows, 1)
    retrieval_s = time.perf_counter() - t0
    prefixes = window_prefixes(tokenizer, windows, passages, config)

    num_scored = sum(w.num_scored for w in windows)
    num_words = plan.num_words
    with_passage = [w for w in windows if w.has_retrieval and passages[w.index]]
    distinct_passages = {passages[w.index][0].id for w in with_passage}
    distinct_prefixes = {tuple(prefixes[w.index]) for w in with_passage}
    passage_tokens = [min(len(prefixes[w.index]), w.length) for w in with_passage]
    counts = {
        "num_tokens": len(ids),
        "num_scored_tokens": num_scored,
        "num_words": num_words,
        "num_windows": len(windows),
        "num_windows_with_passage": len(with_passage),
        "num_distinct_passages": len(distinct_passages),
        "num_distinct_prefixes": len(distinct_prefixes),
        "windows_per_distinct_passage": len(with_passage) / len(distinct_prefixes) if distinct_prefixes else 0.0,
        "mean_passage_tokens": sum(passage_tokens) / len(passage_tokens) if passage_tokens else 0.0,
        "max_length": max_length,
        "window_input_tokens": sum(w.length for w in windows),
    }
    print(f"[bench] {counts['num_windows']} windows ({counts['num_windows_with_passage']} with a passage, "
          f"{counts['num_distinct_passages']} distinct passages), {num_scored} scored tokens", file=sys.stderr,
          flush=True)

    # --- the variants, all on the same ids / windows / prefixes ---------------------------------------------------
    warm = windows[1:] or windows  # warm up on retrieved windows, which is what the timed runs mostly see
    bs = args.batch_size
    show = args.progress

    def ours(model, reuse: bool):
        return (
            lambda: score_windows(model, ids, windows, prefixes, bs, reuse_prefix_kv=reuse, show_progress=show),
            lambda: score_windows(model, ids, warm[:bs], prefixes, bs, reuse_prefix_kv=reuse, show_progress=False),
        )

    variants = [
        ("reference loop", "float32", model32, 1, "every position", False,
         lambda: reference_window_nlls(model32, ids, windows, prefixes),
         lambda: reference_window_nlls(model32, ids, warm[:1], prefixes)),
        ("score_windows", "float32", model32, bs, "scored only", True, *ours(model32, True)),
        ("score_windows, no KV reuse", "float32", model32, bs, "scored only", False, *ours(model32, False)),
        ("score_windows", "bfloat16", model16, bs, "scored only", True, *ours(model16, True)),
    ]
    if widened16 is not None:
        variants.append(("score_windows, widened products", "bfloat16", widened16, bs, "scored only", True,
                         *ours(widened16, True)))
    results = []
    ref_nll = None
    for name, dtype, model, batch, logits, reuse, fn, warmup in variants:
        nll, seconds = timed(f"{name} ({dtype})", fn, warmup, device)
        if torch.isnan(nll[1:]).any() or not torch.isnan(nll[0]):
            raise RuntimeError(f"{name} ({dtype}) did not score every token but the first exactly once")
        figures = perplexity_figures(float(nll[1:].sum()), len(ids), num_scored, num_words)
        if ref_nll is None:
            ref_nll, ref_figures, ref_seconds = nll, figures, seconds
        abs_diff = figures["token_ppl"] - ref_figures["token_ppl"]
        rel_diff = abs_diff / ref_figures["token_ppl"]
        tolerance = BF16_MAX_REL_DIFF if dtype == "bfloat16" else FP32_MAX_REL_DIFF
        results.append({
            "variant": name,
            "dtype": dtype,
            "batch_size": batch,
            "logits": logits,
            "reuse_prefix_kv": reuse,
            "seconds": seconds,
            "scored_tokens_per_s": num_scored / seconds,
            "windows_per_s": len(windows) / seconds,
            "speedup_vs_reference": ref_seconds / seconds,
            "token_ppl": figures["token_ppl"],
            "word_ppl": figures["word_ppl"],
            "nll_sum": figures["nll_sum"],
            "token_ppl_abs_diff": abs_diff,
            "token_ppl_rel_diff": rel_diff,
            "max_abs_token_nll_diff": float((nll[1:] - ref_nll[1:]).abs().max()),
            "rel_diff_tolerance": tolerance,
            "check_passed": abs(rel_diff) <= tolerance,
        })

    # --- report -------------------------------------------------------------------------------------------------
    environment = {
        **run_environment(command, device),
        "model": args.model,
        "data": args.data,
        "index_dir": args.index_dir,
        "num_index_passages": len(retriever),
    }
    settings = {"max_length": max_length, "stride": config.retrieval_stride, "query_length": config.query_length,
                "max_doc_tokens": config.max_doc_tokens, "max_eval_tokens": args.max_eval_tokens,
                "batch_size": bs}
    timings = {"model_load_s": load_s, "tokenize_and_plan_s": tokenize_s, "index_load_s": index_load_s,
               "retrieval_s": retrieval_s}
    report = {"environment": environment, "settings": settings, "counts": counts, "timings": timings,
              "variants": results}
    if args.json_out:
        write_json_atomic(os.path.expanduser(args.json_out), report)

    print()
    print("| # | variant | dtype | batch | logits | passage KV reuse | time (s) | scored tok/s | speed-up vs ref "
          "| token ppl | Δppl vs ref | Δppl rel | max \\|ΔNLL\\| per token | check |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(results, 1):
        check = "ref" if i == 1 else ("ok" if r["check_passed"] else "FAIL") + f" (≤{r['rel_diff_tolerance']:.0e})"
        print(f"| {i} | {r['variant']} | {r['dtype']} | {r['batch_size']} | {r['logits']} | "
              f"{'yes' if r['reuse_prefix_kv'] else 'no'} | {r['seconds']:.2f} | {r['scored_tokens_per_s']:.1f} | "
              f"{r['speedup_vs_reference']:.2f}× | {r['token_ppl']:.4f} | {r['token_ppl_abs_diff']:+.2e} | "
              f"{r['token_ppl_rel_diff']:+.2e} | {r['max_abs_token_nll_diff']:.1e} | {check} |")
    print()
    print(f"- command: `{command}`")
    print(f"- torch {environment['torch']}, transformers {environment['transformers']}, Python "
          f"{environment['python']}; threads {environment['threads']}; device {environment['device']}")
    print(f"- model {args.model}; data {args.data}; BM25 index {args.index_dir} "
          f"({environment['num_index_passages']:,} passages)")
    print(f"- max_length {max_length}, stride {config.retrieval_stride}, query length {config.query_length}, "
          f"max_doc_tokens {config.max_doc_tokens}, first {len(ids)} tokens ({num_scored} scored)")
    print(f"- {counts['num_windows']} windows, {counts['num_windows_with_passage']} with a passage; "
          f"{counts['num_distinct_passages']} distinct passages ({counts['windows_per_distinct_passage']:.2f} "
          f"windows per passage, {counts['mean_passage_tokens']:.0f} passage tokens on average)")
    print(f"- setup, untimed: model load {load_s:.1f} s, tokenize {tokenize_s:.1f} s, index load "
          f"{index_load_s:.1f} s, retrieval {retrieval_s:.1f} s")
    if args.json_out:
        print(f"- figures written to {args.json_out}")
    failed = [f"{r['variant']} ({r['dtype']})" for r in results if not r["check_passed"]]
    if failed:
        print(f"bench_speed: perplexity differs from the reference beyond tolerance: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
