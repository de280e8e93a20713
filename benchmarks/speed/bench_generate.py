"""Speed benchmark of generation with In-Context RALM, side by side in one run, on the same prompts.

Variants (each gets one warm-up, on the first two prompts for two strides, before it is timed with
``time.perf_counter``; all greedy, float32, the same prompts, the same number of new tokens):

a. ``RetrievalAugmentedModel.generate``: the rows of the batch decoded together, the KV cache of ``[passage; prefix]``
   kept while a row's passage does not change, passages' keys/values shared through the passage cache;
b. the rebuild-every-step reference: the same call with ``use_cache=False``, which runs the whole
   ``[passage; x[a_j:]]`` at every step (``--reference-prompts N`` runs it on the first N prompts only; then (a) is
   also timed on those N prompts, so that the speed-up compares like with like);
c. plain ``generate`` of the base model, no retrieval;
g. (a) behind the score gate (``retrieval_gate="score"``, ``--gate-threshold``): a stride without a passage resumes
   the row's plain context, whose cache then takes only the tokens generated since;
g'. the same with ``keep_plain_context=False``: such a stride rebuilds its plain context. (g) against (g') is what
   keeping the plain context saves (forward tokens and time); they must give identical tokens.

Every variant generates exactly ``--max-new-tokens`` tokens per prompt: ``min_new_tokens = max_new_tokens`` (the
generation config's ``MinNewTokensLengthLogitsProcessor``, which ``generate`` builds for the RALM decoding loop too)
keeps EOS out. Timings include retrieval (BM25), which is also reported on its own. The benchmark prints tokens/s,
the fraction of strides whose passage changed, the prefill tokens the passage cache saved, the speed-up of (a) over
(b) (target: at least 3x), the cost of (a) relative to (c), whether (a) and (b) produced identical tokens on the
prompts both ran, and for the gate the share of strides that retrieved and what resuming the plain context saved,
then the command line, torch version, threads and device. The exit status is 1 when (a) and (b), or (g) and (g'),
differ.

Settings are those of the issue: SmolLM2-135M, BM25 over the Wikipedia sample (WikiText's own articles excluded),
stride 4, query length 32, passages cut to 256 tokens, max_length 512, 128 new tokens for 8 prompts, each the first
64 tokens of one of the first WikiText-103 test rows with at least 40 words::

    python benchmarks/speed/bench_generate.py --json-out ~/.cache/hf-ralm/bench/generate.json

A quick smoke test: ``--num-prompts 2 --max-new-tokens 8 --max-length 128 --threads 1``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import torch
from benchmarks.bench_common import available_cores, environment as run_environment, synchronize
from benchmarks.bench_setup import DEFAULT_SETTINGS, SHARED


HOME = Path.home()

SPEEDUP_TARGET = 3.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from hf_ralm.cli import add_ralm_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(HOME / ".cache/hf-ralm/models/smollm2-135m-instruct"))
    parser.add_argument("--data", default=str(SHARED / "wikitext-103" / "test.jsonl"),
                        help="JSONL rows with a 'text' field; prompts come from the first rows with enough words")
    parser.add_argument("--prompts-file", help="one prompt per line instead of --data (the first --num-prompts)")
    parser.add_argument("--min-words", type=int, default=40,
                        help="only --data rows with at least this many words become prompts (default 40)")
    parser.add_argument("--prompt-tokens", type=int, default=64,
                        help="cut every prompt to its first this many tokens (default 64; 0: keep them whole)")
    parser.add_argument("--num-prompts", type=int, default=8, help="prompts, generated as one batch (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens generated per prompt (default 128)")
    parser.add_argument("--reference-prompts", type=int, default=None,
                        help="run the rebuild-every-step reference on the first N prompts only (default: all)")
    parser.add_argument("--forbidden-titles", default=str(SHARED / "wikitext-103" / "forbidden_titles.txt"),
                        help="titles never to retrieve ('' for none)")
    parser.add_argument("--index-dir", default=str(HOME / ".cache/hf-ralm/index/wikipedia-2015-sample-bm25"))
    # the score gate of (g) and (g'); normalised top scores mostly lie in 0.15-0.4
    add_ralm_arguments(parser, settings=("max_length", "retrieval_stride", "query_length", "max_doc_tokens",
                                         "gate_threshold"), defaults={**DEFAULT_SETTINGS, "gate_threshold": 0.25})
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: every core this process may use)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--json-out", help="write every figure to this JSON file (atomically)")
    args = parser.parse_args(argv)
    for name in ("num_prompts", "max_new_tokens", "max_length", "stride", "query_length", "max_doc_tokens",
                 "min_words"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.prompt_tokens < 0:
        parser.error("--prompt-tokens must be at least 0")
    if args.reference_prompts is not None and not 1 <= args.reference_prompts <= args.num_prompts:
        parser.error("--reference-prompts must be between 1 and --num-prompts")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    return args


class TimedRetriever:
    """Delegates to a retriever and adds up the seconds its ``retrieve`` calls take."""

    def __init__(self, retriever):
        self.retriever = retriever
        self.seconds = 0.0
        self.calls = 0

    def retrieve(self, queries, k: int = 1):
        return self._timed(self.retriever.retrieve, queries, k=k)

    def max_scores(self, queries):
        return self._timed(self.retriever.max_scores, queries)

    def _timed(self, method, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1

    def config(self) -> dict:
        return self.retriever.config()

    def __len__(self) -> int:
        return len(self.retriever)


def load_prompt_texts(args: argparse.Namespace) -> list[str]:
    texts: list[str] = []
    if args.prompts_file:
        with open(args.prompts_file, encoding="utf-8") as f:
            texts = [line.strip() for line in f if line.strip()][: args.num_prompts]
    else:
        with open(args.data, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                text = json.loads(line)["text"].strip()
                if len(text.split()) >= args.min_words:
                    texts.append(text)
                    if len(texts) == args.num_prompts:
                        break
    if len(texts) < args.num_prompts:
        source = args.prompts_file or f"{args.data} (rows of at least {args.min_words} words)"
        raise SystemExit(f"bench_generate: only {len(texts)} prompts in {source}, --num-prompts is {args.num_prompts}")
    return texts


def left_pad(rows: list[list[int]], pad: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    return ids, mask


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([os.path.basename(sys.executable), *sys.argv]) if argv is None else shlex.join(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_ralm import RetrievalAugmentedModel, model_device
    from hf_ralm.retrieval import BM25Retriever, read_forbidden_titles
    from hf_ralm.utils import write_json_atomic

    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    device_arg = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    # --- setup (not timed against anything) -------------------------------------------------------------------
    t0 = time.perf_counter()
    base = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(device_arg).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    device = model_device(base)  # the model's device drives everything below
    load_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    forbidden = read_forbidden_titles(args.forbidden_titles) if args.forbidden_titles else frozenset()
    retriever = TimedRetriever(BM25Retriever.load(args.index_dir, forbidden_titles=forbidden))
    index_load_s = time.perf_counter() - t0

    ralm_settings = dict(retriever=retriever, tokenizer=tokenizer, retrieval_stride=args.stride,
                         query_length=args.query_length, max_doc_tokens=args.max_doc_tokens,
                         max_length=args.max_length)
    ralm = RetrievalAugmentedModel.from_pretrained(base, **ralm_settings)
    gated = RetrievalAugmentedModel.from_pretrained(base, retrieval_gate="score", gate_threshold=args.gate_threshold,
                                                    **ralm_settings)
    config = ralm.config

    texts = load_prompt_texts(args)
    prompts = [tokenizer(text)["input_ids"] for text in texts]
    if args.prompt_tokens:
        prompts = [p[: args.prompt_tokens] for p in prompts]
    if any(not p for p in prompts):
        raise SystemExit("bench_generate: a prompt has no tokens")
    pad_id = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    eos_ids = base.generation_config.eos_token_id
    eos_ids = set() if eos_ids is None else set([eos_ids] if isinstance(eos_ids, int) else eos_ids)
    if not eos_ids:
        print("[bench] the model has no eos_token_id: generation cannot stop early anyway", file=sys.stderr)
    n_new = args.max_new_tokens
    n_ref = args.reference_prompts or len(prompts)
    print(f"[bench] {len(prompts)} prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, {n_new} new "
          f"tokens each; reference on {n_ref}", file=sys.stderr, flush=True)

    # greedy, exactly n tokens: min_new_tokens keeps EOS out (MinNewTokensLengthLogitsProcessor)
    def gen_kwargs(n: int) -> dict:
        return {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "num_beams": 1,
                "pad_token_id": pad_id}

    def ralm_run(rows: list[list[int]], n: int, use_cache: bool):
        ids, mask = left_pad(rows, pad_id, device)
        out = ralm.generate(ids, attention_mask=mask, use_cache=use_cache, return_dict_in_generate=True,
                            **gen_kwargs(n))
        return out.sequences[:, ids.shape[1]:], out

    def gated_run(rows: list[list[int]], n: int, keep_plain_context: bool):
        ids, mask = left_pad(rows, pad_id, device)
        out = gated.generate(ids, attention_mask=mask, keep_plain_context=keep_plain_context,
                             return_dict_in_generate=True, **gen_kwargs(n))
        return out.sequences[:, ids.shape[1]:], out

    def plain_run(rows: list[list[int]], n: int):
        ids, mask = left_pad(rows, pad_id, device)
        with torch.no_grad():
            sequences = base.generate(ids, attention_mask=mask, **gen_kwargs(n))
        return sequences[:, ids.shape[1]:], None

    warm_rows = prompts[:2]
    warm_new = min(n_new, 2 * config.retrieval_stride)
    variants = [
        ("a", "RALM generate (ours)", len(prompts), lambda r, n: ralm_run(r, n, True)),
        ("b", "rebuild every step (use_cache=False)", n_ref, lambda r, n: ralm_run(r, n, False)),
    ]
    if n_ref < len(prompts):
        variants.append(("a'", f"RALM generate (ours), reference's {n_ref} prompts", n_ref,
                         lambda r, n: ralm_run(r, n, True)))
    variants.append(("c", "plain generate, no retrieval", len(prompts), plain_run))
    gate = f"score gate ≥ {args.gate_threshold}"
    variants.append(("g", f"{gate}, plain context resumed (ours)", len(prompts), lambda r, n: gated_run(r, n, True)))
    variants.append(("g'", f"{gate}, plain context rebuilt", len(prompts), lambda r, n: gated_run(r, n, False)))

    results: dict[str, dict] = {}
    outputs: dict[str, torch.Tensor] = {}
    for key, name, n_rows, fn in variants:
        rows = prompts[:n_rows]
        print(f"[bench] ({key}) {name}: warm-up ...", file=sys.stderr, flush=True)
        fn(warm_rows[:n_rows], warm_new)
        synchronize(device)
        print(f"[bench] ({key}) {name}: timing {n_rows} prompts x {n_new} tokens ...", file=sys.stderr, flush=True)
        retriever.seconds, retriever.calls = 0.0, 0
        t0 = time.perf_counter()
        generated, out = fn(rows, n_new)
        synchronize(device)
        seconds = time.perf_counter() - t0
        generated = generated.cpu()
        print(f"[bench] ({key}) {name}: {seconds:.2f} s", file=sys.stderr, flush=True)
        num_tokens = generated.numel()
        eos_count = int(sum((generated == e).sum() for e in eos_ids)) if eos_ids else 0
        if generated.shape != (n_rows, n_new):
            raise RuntimeError(f"({key}) generated {tuple(generated.shape)} tokens, expected {(n_rows, n_new)}: "
                               "min_new_tokens did not keep every row going")
        stats = out.ralm_stats if out is not None else None
        results[key] = {
            "variant": name,
            "num_prompts": n_rows,
            "new_tokens_per_prompt": n_new,
            "generated_tokens": num_tokens,
            "eos_in_output": eos_count,
            "seconds": seconds,
            "tokens_per_s": num_tokens / seconds,
            "retrieval_s": retriever.seconds if out is not None else 0.0,
            "retrieval_calls": retriever.calls if out is not None else 0,
            "ralm_stats": stats,
            "sources": ([[[s["start"], s["end"], s["id"]] for s in row] for row in out.sources]
                        if out is not None else None),
        }
        outputs[key] = generated

    a, b, c, g, g_rebuilt = results["a"], results["b"], results["c"], results["g"], results["g'"]
    a_same = results.get("a'", a)  # (a) on the prompts (b) ran
    # sanity: the reference really rebuilt at every step, ours really used its caches
    if b["ralm_stats"]["passage_cache"]["misses"] or b["ralm_stats"]["batched_steps"]:
        raise RuntimeError("the use_cache=False reference used KV caches: it is not the rebuild-every-step loop")

    # --- checks and derived figures ---------------------------------------------------------------------------
    same_tokens = torch.equal(outputs["a"][:n_ref], outputs["b"])
    differing_rows = [i for i in range(n_ref) if not torch.equal(outputs["a"][i], outputs["b"][i])]
    same_sources = a["sources"][:n_ref] == b["sources"]
    same_as_plain = float((outputs["a"] == outputs["c"]).float().mean())
    gate_same_tokens = torch.equal(outputs["g"], outputs["g'"])
    gate_stats, rebuilt_stats = g["ralm_stats"], g_rebuilt["ralm_stats"]

    stats = a["ralm_stats"]
    cache = stats["passage_cache"]
    later_strides = stats["strides"] - len(prompts)  # strides after each row's first
    change_fraction = stats["passage_changes"] / later_strides if later_strides else 0.0
    passage_tokens = cache["reused_tokens"] + cache["computed_tokens"]
    speedup_same = a_same["tokens_per_s"] / b["tokens_per_s"]
    speedup_all = a["tokens_per_s"] / b["tokens_per_s"]
    cost_vs_plain = c["tokens_per_s"] / a["tokens_per_s"]
    derived = {
        "passage_change_fraction": change_fraction,
        "strides": stats["strides"],
        "strides_after_first": later_strides,
        "passage_changes": stats["passage_changes"],
        "empty_retrievals": stats["empty_retrievals"],
        "contexts_kept": stats["contexts_kept"],
        "contexts_rebuilt": stats["contexts_rebuilt"],
        "passage_cache_reused_tokens": cache["reused_tokens"],
        "passage_cache_computed_tokens": cache["computed_tokens"],
        "passage_cache_hits": cache["hits"],
        "passage_cache_misses": cache["misses"],
        "passage_prefill_saved_fraction": cache["reused_tokens"] / passage_tokens if passage_tokens else 0.0,
        "speedup_a_over_b_same_prompts": speedup_same,
        "speedup_a_all_over_b": speedup_all,
        "speedup_target": SPEEDUP_TARGET,
        "speedup_target_met": speedup_same >= SPEEDUP_TARGET,
        "plain_over_a_time_ratio": cost_vs_plain,
        "a_ms_per_token": 1e3 / a["tokens_per_s"],
        "c_ms_per_token": 1e3 / c["tokens_per_s"],
        "a_retrieval_share": a["retrieval_s"] / a["seconds"],
        "a_b_identical_tokens": same_tokens,
        "a_b_differing_rows": differing_rows,
        "a_b_identical_sources": same_sources,
        "a_c_same_token_fraction": same_as_plain,
        "gate_threshold": args.gate_threshold,
        "gate_retrieved_fraction": gate_stats["retrieved_fraction"],
        "gate_plain_contexts_resumed": gate_stats["plain_contexts_resumed"],
        "gate_plain_tokens_reused": gate_stats["plain_tokens_reused"],
        "gate_forward_tokens_resumed": gate_stats["forward_tokens"],
        "gate_forward_tokens_rebuilt": rebuilt_stats["forward_tokens"],
        "gate_speedup_resumed_over_rebuilt": g["tokens_per_s"] / g_rebuilt["tokens_per_s"],
        "gate_g_g_prime_identical_tokens": gate_same_tokens,
    }

    # --- report -------------------------------------------------------------------------------------------------
    environment = {
        **run_environment(command, device),
        "model": args.model,
        "prompts": args.prompts_file or args.data,
        "index_dir": args.index_dir,
        "num_index_passages": len(retriever),
    }
    settings = {"max_length": args.max_length, "stride": config.retrieval_stride,
                "query_length": config.query_length, "max_doc_tokens": config.max_doc_tokens,
                "num_prompts": len(prompts), "reference_prompts": n_ref, "max_new_tokens": n_new,
                "min_new_tokens": n_new, "prompt_tokens": args.prompt_tokens,
                "prompt_lengths": [len(p) for p in prompts], "decoding": "greedy", "dtype": "float32",
                "forbidden_titles": len(forbidden)}
    timings = {"model_load_s": load_s, "index_load_s": index_load_s}
    report = {"environment": environment, "settings": settings, "timings": timings,
              "variants": [{"key": k, **{f: v for f, v in r.items() if f != "sources"}} for k, r in results.items()],
              "figures": derived}
    if args.json_out:
        write_json_atomic(os.path.expanduser(args.json_out), report)

    sys.stderr.flush()
    print()
    print("| # | variant | prompts (batch) | new tokens | time (s) | tokens/s | retrieval (s) | model forward tokens "
          "| speed-up vs (b) | time vs (c) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key, r in results.items():
        forward = r["ralm_stats"]["forward_tokens"] if r["ralm_stats"] else "—"
        if key == "b":
            vs_b = "1.00× (ref)"
        elif key == "c":
            vs_b = "—"
        elif r["num_prompts"] == n_ref:
            vs_b = f"{r['tokens_per_s'] / b['tokens_per_s']:.2f}×"
        else:
            vs_b = f"{r['tokens_per_s'] / b['tokens_per_s']:.2f}× (vs (b) on {n_ref} prompts)"
        vs_c = "1.00× (base)" if key == "c" else f"{c['tokens_per_s'] / r['tokens_per_s']:.2f}× slower"
        retrieval = f"{r['retrieval_s']:.2f}" if r["ralm_stats"] else "—"
        print(f"| {key} | {r['variant']} | {r['num_prompts']} | {r['generated_tokens']} | {r['seconds']:.2f} | "
              f"{r['tokens_per_s']:.2f} | {retrieval} | {forward} | {vs_b} | {vs_c} |")
    print()
    if n_ref < len(prompts):
        print(f"- **(b) ran on the first {n_ref} of the {len(prompts)} prompts only** (--reference-prompts); its "
              f"tokens/s is over those {n_ref} prompts, and (a') is ours on the same {n_ref} prompts")
    label = "(a') over (b), same prompts" if n_ref < len(prompts) else "(a) over (b)"
    print(f"- speed-up {label}: {speedup_same:.2f}× (target ≥ {SPEEDUP_TARGET:.0f}×: "
          f"{'met' if speedup_same >= SPEEDUP_TARGET else 'NOT met'})"
          + (f"; (a) with all {len(prompts)} prompts over (b): {speedup_all:.2f}×" if n_ref < len(prompts) else ""))
    print(f"- cost of (a) relative to plain generate (c): {cost_vs_plain:.2f}× the time per token "
          f"({derived['a_ms_per_token']:.1f} ms vs {derived['c_ms_per_token']:.1f} ms per generated token, batch "
          f"of {len(prompts)}); retrieval is {a['retrieval_s']:.2f} s ({100 * derived['a_retrieval_share']:.0f} %) of "
          f"(a)'s time ({a['retrieval_calls']} batched BM25 calls)")
    print(f"- passage changed in {stats['passage_changes']} of {later_strides} strides after each row's first "
          f"({100 * change_fraction:.1f} %); {stats['strides']} row-strides, {stats['empty_retrievals']} empty "
          f"retrievals; contexts kept {stats['contexts_kept']}, rebuilt {stats['contexts_rebuilt']}")
    print(f"- passage cache (a): {cache['reused_tokens']} passage prefill tokens saved (reused) vs "
          f"{cache['computed_tokens']} computed ({100 * derived['passage_prefill_saved_fraction']:.1f} % of passage "
          f"tokens), {cache['hits']} hits / {cache['misses']} misses; model forward tokens (passages excluded) "
          f"{stats['forward_tokens']} for (a) vs {b['ralm_stats']['forward_tokens']} for (b)"
          + (f" on {n_ref} prompts" if n_ref < len(prompts) else ""))
    print(f"- (a) and (b) identical tokens on the {n_ref} prompts both ran (greedy, fp32): "
          f"{'yes' if same_tokens else 'NO (rows ' + ', '.join(map(str, differing_rows)) + ')'}; identical sources: "
          f"{'yes' if same_sources else 'NO'}; (a) vs plain (c): {100 * same_as_plain:.1f} % of tokens equal")
    eos_counts = ", ".join(f"({k}) {r['eos_in_output']}" for k, r in results.items())
    print(f"- every variant generated exactly {n_new} tokens per prompt (min_new_tokens = max_new_tokens); EOS in "
          f"outputs: {eos_counts}")
    print(f"- score gate ≥ {args.gate_threshold} (g): {100 * gate_stats['retrieved_fraction']:.1f} % of "
          f"{gate_stats['strides']} row-strides had a passage in context; {gate_stats['plain_contexts_resumed']} "
          f"strides resumed the plain context, which saved {gate_stats['plain_tokens_reused']} forward tokens "
          f"({gate_stats['forward_tokens']} for (g) vs {rebuilt_stats['forward_tokens']} for (g')); (g) over (g'): "
          f"{derived['gate_speedup_resumed_over_rebuilt']:.2f}× the tokens/s; identical tokens: "
          f"{'yes' if gate_same_tokens else 'NO'}")
    print(f"- command: `{command}`")
    print(f"- torch {environment['torch']}, transformers {environment['transformers']}, Python "
          f"{environment['python']}; threads {environment['threads']}; device {environment['device']}")
    print(f"- model {args.model}; prompts {environment['prompts']} ({len(prompts)} prompts of "
          f"{min(settings['prompt_lengths'])}-{max(settings['prompt_lengths'])} tokens); BM25 index "
          f"{args.index_dir} ({environment['num_index_passages']:,} passages, {len(forbidden)} forbidden titles)")
    print(f"- max_length {args.max_length}, stride {config.retrieval_stride}, query length {config.query_length}, "
          f"max_doc_tokens {config.max_doc_tokens}, greedy, float32; timings include retrieval; one warm-up per "
          f"variant ({len(warm_rows)} prompts, {warm_new} tokens)")
    print(f"- setup, untimed: model load {load_s:.1f} s, index load {index_load_s:.1f} s")
    if args.json_out:
        print(f"- figures written to {args.json_out}")
    if not same_tokens:
        print(f"bench_generate: (a) and (b) generated different tokens (rows {differing_rows})", file=sys.stderr)
        return 1
    if not gate_same_tokens:
        print("bench_generate: (g) and (g') generated different tokens", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
