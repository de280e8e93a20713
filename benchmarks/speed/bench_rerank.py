"""Speed benchmark of zero-shot LM reranking: the reference's batched ``logprob`` loop against
``rerank_windows``, side by side in one run, on the same windows and the same k BM25 candidates.

Variants (each gets one warm-up before it is timed):

1. reference loop, float32: per window one ``(k, L)`` forward of the k candidate inputs with logits for every
   position (the paper's ``eval_lm.py --ranking_strategy logprob``);
2. ``rerank_windows``, float32: logits only at the s' ranking + scored positions, each distinct passage's keys/values
   computed once and shared by every window that has it as a candidate, inputs batched across windows;
3. the same without the passage keys/values (``reuse_prefix_kv=False``);
4. ``rerank_windows``, bfloat16.

Checks: float32 chooses exactly the reference's passages and its perplexity is within 1e-4 (relative); bfloat16's
perplexity within 0.5 % (its choices may differ where two candidates nearly tie: the agreement is printed). It also
measures how much consecutive windows' candidate sets overlap (what the shared keys/values exploit).

With ``--other-reader`` (e.g. Gemma-3-270M) it times, on that reader's own windows, the reader ranking its
candidates itself against a smaller LM (``--model``, e.g. SmolLM2-135M) ranking them for it in text, plus the
reader scoring the chosen passages: the cost per window of each way.

    python benchmarks/speed/bench_rerank.py --json-out ~/.cache/hf-ralm/bench/rerank.json \\
        --other-reader ~/.cache/hf-ralm/models/gemma-3-270m

The default (first 600 tokens of WikiText-103 test at L=512, s=4: 23 windows, 22 reranked among k=16) takes about
ten minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

import torch
from benchmarks.bench_common import environment as run_environment, timed
from benchmarks.bench_setup import DEFAULT_SETTINGS, SHARED

HOME = Path.home()
FP32_MAX_REL_DIFF = 1e-4
BF16_MAX_REL_DIFF = 5e-3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from hf_ralm.cli import add_ralm_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(HOME / ".cache/hf-ralm/models/smollm2-135m-instruct"))
    parser.add_argument("--other-reader", help="a larger reader for the smaller-reranker comparison (optional)")
    parser.add_argument("--data", default=str(SHARED / "wikitext-103" / "test.jsonl"))
    parser.add_argument("--forbidden-titles", default=str(SHARED / "wikitext-103" / "forbidden_titles.txt"))
    parser.add_argument("--index-dir", default=str(HOME / ".cache/hf-ralm/index/wikipedia-2015-sample-bm25"))
    parser.add_argument("--max-eval-tokens", type=int, default=600)
    add_ralm_arguments(parser, settings=("max_length", "retrieval_stride", "query_length", "rerank_candidates",
                                         "rerank_tokens"), defaults=DEFAULT_SETTINGS)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--json-out", help="write every figure to this JSON file (atomically)")
    return parser.parse_args(argv)


class Setup:
    """One reader's text, windows, queries and k candidates per window, ready for every variant."""

    def __init__(self, model_path: str, args, device: str, retriever):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from hf_ralm import RalmConfig, load_dataset_text, prepare, resolve_max_length

        self.path = model_path
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.models = {}
        for dtype in (torch.float32, torch.bfloat16):
            self.models[dtype] = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device).eval()
        self.config = RalmConfig(retrieval_stride=args.stride, query_length=args.query_length,
                                 max_length=args.max_length, rerank="lm", rerank_candidates=args.rerank_candidates,
                                 rerank_tokens=args.rerank_tokens, bos_every_window=True)
        max_length = resolve_max_length(self.models[torch.float32], args.max_length)
        plan = prepare(load_dataset_text(args.data), self.tokenizer, self.config, retriever, max_length=max_length,
                       max_eval_tokens=args.max_eval_tokens)
        self.ids, self.windows, self.queries = plan.ids, plan.windows, plan.queries
        self.candidates = plan.candidates(self.windows, args.rerank_candidates)

    def rerank(self, dtype, reranker=None, reuse=True, batch_size=8, windows=None, passage_cache=None):
        from hf_ralm.selection import rerank_windows

        windows = self.windows if windows is None else windows
        return rerank_windows(self.models[dtype], self.tokenizer, self.ids, windows, self.queries,
                              candidates=self.candidates,
                              config=self.config, reranker=reranker, batch_size=batch_size, reuse_prefix_kv=reuse,
                              passage_cache=passage_cache, show_progress=False)


def overlap(candidates) -> float:
    """Of the candidates of windows 2, 3, ..., the fraction that were candidates of the window before."""
    shared = total = 0
    for before, now in zip(candidates[1:], candidates[2:]):
        ids = {p.id for p in before}
        shared += sum(p.id in ids for p in now)
        total += len(now)
    return shared / total if total else 0.0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([os.path.basename(sys.executable), *sys.argv]) if argv is None else shlex.join(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    from hf_ralm import PassageKVCache, passage_prefix, perplexity_from_nll, score_windows, window_prefixes
    from hf_ralm.retrieval import BM25Retriever, read_forbidden_titles
    from hf_ralm.selection import LMReranker
    from hf_ralm.testing import reference_rerank_nlls
    from hf_ralm.utils import write_json_atomic

    forbidden = read_forbidden_titles(args.forbidden_titles) if args.forbidden_titles else frozenset()
    retriever = BM25Retriever.load(args.index_dir, forbidden_titles=forbidden)
    main_setup = Setup(args.model, args, device, retriever)
    s = main_setup
    ranked = [w for w in s.windows if w.has_retrieval and s.candidates[w.index]]
    num_tokens = len(s.ids)
    warm = s.windows[1:3]
    prefixes = [[passage_prefix(s.tokenizer, p, s.config) for p in s.candidates[w.index][: s.config.rerank_candidates]]
                if w.has_retrieval and s.candidates[w.index] else [passage_prefix(s.tokenizer, None, s.config)]
                for w in s.windows]

    def ppl(nll):
        return perplexity_from_nll(float(nll[1:].sum()), num_tokens)

    rows = []
    (ref_chosen, ref_nll), ref_s = timed(
        "reference loop (float32)",
        lambda: reference_rerank_nlls(s.models[torch.float32], s.ids, s.windows, prefixes, args.rerank_tokens),
        lambda: reference_rerank_nlls(s.models[torch.float32], s.ids, warm, prefixes, args.rerank_tokens),
        torch.device(device))
    ref_chosen = [c if w.has_retrieval and s.candidates[w.index] else -1 for c, w in zip(ref_chosen, s.windows)]
    rows.append(("reference loop: (k, L) forward, every position's logits", "float32", ref_s, ref_chosen, ref_nll))
    cache_stats = {}
    for name, dtype, reuse in [("rerank_windows", torch.float32, True),
                               ("rerank_windows, no passage KV reuse", torch.float32, False),
                               ("rerank_windows", torch.bfloat16, True)]:
        cache = PassageKVCache(s.models[dtype]) if reuse else None
        outcome, seconds = timed(f"{name} ({dtype})",
                                 lambda: s.rerank(dtype, reuse=reuse, batch_size=args.batch_size, passage_cache=cache),
                                 lambda: s.rerank(dtype, reuse=reuse, batch_size=args.batch_size, windows=warm),
                                 torch.device(device))
        if cache is not None:
            cache_stats[str(dtype)] = cache.stats()
        rows.append((name, str(dtype).replace("torch.", ""), seconds, outcome.chosen, outcome.token_nlls))

    results = []
    ref_ppl = ppl(ref_nll)
    for name, dtype, seconds, chosen, nll in rows:
        agree = sum(a == b for a, b in zip(chosen[1:], ref_chosen[1:])) / max(1, len(chosen) - 1)
        rel = (ppl(nll) - ref_ppl) / ref_ppl
        tolerance = BF16_MAX_REL_DIFF if dtype == "bfloat16" else FP32_MAX_REL_DIFF
        passed = abs(rel) <= tolerance and (dtype == "bfloat16" or chosen == ref_chosen)
        results.append({"variant": name, "dtype": dtype, "seconds": seconds, "s_per_window": seconds / len(s.windows),
                        "speedup_vs_reference": ref_s / seconds, "token_ppl": ppl(nll), "ppl_rel_diff": rel,
                        "choice_agreement": agree, "check_passed": passed})

    smaller = None
    if args.other_reader:
        big = Setup(args.other_reader, args, device, retriever)
        small = LMReranker(s.models[torch.bfloat16], s.tokenizer, args.max_length)
        self_outcome, self_s = timed("other reader ranks itself (bfloat16)", lambda: big.rerank(torch.bfloat16),
                                     lambda: big.rerank(torch.bfloat16, windows=big.windows[1:3]),
                                     torch.device(device))

        def small_ranks():
            outcome = big.rerank(torch.bfloat16, reranker=small)
            chosen_prefixes = window_prefixes(big.tokenizer, big.windows, big.candidates, big.config, outcome.chosen)
            return outcome, score_windows(big.models[torch.bfloat16], big.ids, big.windows, chosen_prefixes,
                                          args.batch_size, show_progress=False)

        (small_outcome, small_nll), small_s = timed(
            "smaller LM ranks for it, it scores (bfloat16)", small_ranks,
            lambda: big.rerank(torch.bfloat16, reranker=small, windows=big.windows[1:3]), torch.device(device))

        def big_ppl(nll):
            return perplexity_from_nll(float(nll[1:].sum()), len(big.ids))

        smaller = {"reader": args.other_reader, "reranker": args.model, "windows": len(big.windows),
                   "self_s_per_window": self_s / len(big.windows), "smaller_s_per_window": small_s / len(big.windows),
                   "cost_ratio": small_s / self_s, "self_token_ppl": big_ppl(self_outcome.token_nlls),
                   "smaller_token_ppl": big_ppl(small_nll),
                   "choice_agreement": sum(a == b for a, b in zip(self_outcome.chosen[1:], small_outcome.chosen[1:]))
                   / max(1, len(big.windows) - 1)}

    counts = {"num_tokens": num_tokens, "num_windows": len(s.windows), "num_reranked_windows": len(ranked),
              "mean_candidates": sum(len(s.candidates[w.index]) for w in ranked) / max(1, len(ranked)),
              "candidate_overlap_with_previous_window": overlap([s.candidates[w.index] for w in s.windows]),
              "passage_cache": cache_stats}
    env = run_environment(command, torch.device(device))
    report = {"environment": env, "settings": vars(args), "counts": counts, "variants": results,
              "smaller_reranker": smaller}
    if args.json_out:
        write_json_atomic(os.path.expanduser(args.json_out), report)

    print("\n| # | variant | dtype | time (s) | s / window | speed-up vs ref | token ppl | Δppl rel | "
          "same choices as ref | check |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(results, 1):
        check = "ref" if i == 1 else ("ok" if r["check_passed"] else "FAIL")
        print(f"| {i} | {r['variant']} | {r['dtype']} | {r['seconds']:.1f} | {r['s_per_window']:.2f} | "
              f"{r['speedup_vs_reference']:.2f}× | {r['token_ppl']:.4f} | {r['ppl_rel_diff']:+.1e} | "
              f"{r['choice_agreement']:.1%} | {check} |")
    print(f"\n- command: `{command}`")
    print(f"- torch {env['torch']}, transformers {env['transformers']}; threads {env['threads']}; {env['device']}")
    print(f"- {counts['num_windows']} windows ({counts['num_reranked_windows']} reranked among "
          f"{counts['mean_candidates']:.1f} candidates on average), L={args.max_length}, s={args.stride}, "
          f"ℓ={args.query_length}, k={args.rerank_candidates}, s'={args.rerank_tokens}, BOS in every window")
    print(f"- consecutive windows share {counts['candidate_overlap_with_previous_window']:.1%} of their candidates; "
          f"passage KV store (float32): {cache_stats.get('torch.float32')}")
    if smaller:
        print(f"- {smaller['reader']} ranking its own candidates: {smaller['self_s_per_window']:.2f} s/window "
              f"(ppl {smaller['self_token_ppl']:.3f}); {smaller['reranker']} ranking for it, then the reader "
              f"scoring: {smaller['smaller_s_per_window']:.2f} s/window (ppl {smaller['smaller_token_ppl']:.3f}), "
              f"{smaller['cost_ratio']:.2f}× the cost; same choice in {smaller['choice_agreement']:.1%} of windows")
    failed = [r["variant"] for r in results if not r["check_passed"]]
    if failed:
        print(f"bench_rerank: differs from the reference: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
