"""lm-evaluation-harness on the local tasks (benchmarks/data/lm_eval_tasks): SmolLM2-135M-Instruct through the ralm
model without retrieval, with BM25's top passage and with the lm gate, and through lm-eval's own hf model, on the first
WikiText-103 test documents (perplexity: loglikelihood_rolling), NQ-open as a four-way multiple choice
(loglikelihood) and NQ-open generation (generate_until, exact match), offline.

The RALM runs share one reader: max_length 256, 200-token passages, s=4, ℓ=32, BM25 over the whole Wikipedia sample
(the WikiText-103 articles' own titles excluded), in --dtype. The hf row is lm-eval's plain model at max_length 256:
its perplexity windows are disjoint 256-token chunks (each chunk's first token sees one token of context), where
the RALM's slide every 4 tokens, so its rolling figures differ by construction; its multiple choice and generation
see the same inputs as "none". Prints a markdown table (lm-eval's metrics, ± their standard error) and the share of
windows, contexts and generated strides that had a passage; --json-out keeps the results.

    python benchmarks/tables/lm_eval_tables.py                       # 4 documents, 40 questions: minutes on 2 CPU cores
    python benchmarks/tables/lm_eval_tables.py --documents 2 --questions 8 --strategies none,bm25
"""

from __future__ import annotations

import argparse
import json
import os
import time

from benchmarks.bench_setup import BM25_INDEX, MODELS_DIR, READERS, REPO, SHARED, WIKIPEDIA

TASKS_DIR = REPO / "benchmarks" / "data" / "lm_eval_tasks"
ROLLING, CHOICE, GENERATION = "ralm_wikitext103_local", "ralm_nq_open_choice", "ralm_nq_open_local"
STRATEGIES = {
    "none": {"retriever": None},
    "bm25": {"retriever": "bm25"},
    "lm-gate": {"retriever": "bm25", "retrieval_gate": "lm"},
    "hf": None,  # lm-eval's own hf model
}
SETTINGS = {"max_length": 256, "max_doc_tokens": 200, "retrieval_stride": 4, "query_length": 32}


def build_models(args) -> dict:
    """One lm-eval model per strategy, the RALMs around one loaded reader."""
    from lm_eval.models.huggingface import HFLM

    from hf_ralm import RalmConfig, RetrievalAugmentedModel
    from hf_ralm.integrations import RalmLM

    folder = os.path.join(args.models_dir, READERS["SmolLM2-135M"].folder)
    forbidden = str(SHARED / "wikitext-103" / "forbidden_titles.txt")
    bm25 = RetrievalAugmentedModel.from_pretrained(folder, retriever="bm25", corpus=args.corpus,
                                                   index_dir=args.index_dir, forbidden_titles=forbidden,
                                                   dtype=args.dtype, device="cpu", **SETTINGS)
    models = {}
    for name in args.strategies:
        if STRATEGIES[name] is None:
            models[name] = HFLM(pretrained=bm25.language_model, tokenizer=bm25.tokenizer, max_length=256,
                                batch_size=args.batch_size, device="cpu")
            continue
        options = dict(STRATEGIES[name])
        retriever = bm25.retriever if options.pop("retriever") else None
        config = RalmConfig(base_model_name_or_path=folder, **SETTINGS, **options)
        ralm = RetrievalAugmentedModel(config, bm25.language_model, retriever, bm25.tokenizer)
        models[name] = RalmLM(ralm, batch_size=args.batch_size)
    return models


def metric(results: dict, task: str, name: str, filter_name: str = "none") -> str:
    value = results["results"][task][f"{name},{filter_name}"]
    error = results["results"][task].get(f"{name}_stderr,{filter_name}")
    percent = name in ("acc", "exact_match")
    shown = f"{100 * value:.1f}%" if percent else f"{value:.3f}"
    if isinstance(error, float):
        shown += f" ± {100 * error:.1f}" if percent else f" ± {error:.3f}"
    return shown


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "—"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-dir", default=str(MODELS_DIR))
    parser.add_argument("--index-dir", default=str(BM25_INDEX))
    parser.add_argument("--corpus", default=str(WIKIPEDIA))
    parser.add_argument("--documents", type=int, default=4, help="WikiText-103 test documents (default 4)")
    parser.add_argument("--questions", type=int, default=40, help="NQ-open questions per task (default 40)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help=f"comma-separated, of {', '.join(STRATEGIES)} (default: all)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json-out", help="also write the results here")
    args = parser.parse_args()
    args.strategies = [name.strip() for name in args.strategies.split(",")]
    unknown = [name for name in args.strategies if name not in STRATEGIES]
    if unknown:
        parser.error(f"unknown strategies {unknown}: choose among {', '.join(STRATEGIES)}")

    import hf_ralm  # noqa: F401  (registers ralm with lm-eval)
    import lm_eval
    from lm_eval.tasks import TaskManager

    samples = {ROLLING: list(range(args.documents)), CHOICE: list(range(args.questions)),
               GENERATION: list(range(args.questions))}
    tasks = TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata={"shared_data": str(SHARED)})
    rows, records = [], {}
    for name, model in build_models(args).items():
        start = time.perf_counter()
        results = lm_eval.simple_evaluate(model=model, tasks=list(samples), task_manager=tasks, samples=samples,
                                          log_samples=False)
        seconds = time.perf_counter() - start
        requests = results["config"].get("ralm", {}).get("requests")
        records[name] = {"results": results["results"], "requests": requests, "seconds": seconds}
        passages = "—" if not requests else " / ".join((
            share(requests["rolling_windows_with_passage"], requests["rolling_windows"]),
            share(requests["loglikelihood_contexts_with_passage"], requests["loglikelihood_contexts"]),
            share(requests["generation_strides_with_passage"], requests["generation_strides"])))
        rows.append(f"| {name} | {metric(results, ROLLING, 'word_perplexity')} | "
                    f"{metric(results, ROLLING, 'bits_per_byte')} | {metric(results, CHOICE, 'acc')} | "
                    f"{metric(results, GENERATION, 'exact_match', 'remove_whitespace')} | {passages} | "
                    f"{seconds:.0f} |")
        print(f"[lm_eval_tables] {name}: {seconds:.0f} s", flush=True)
    print(f"\nSmolLM2-135M-Instruct ({args.dtype}), {args.documents} WikiText-103 test documents (first 320 words), "
          f"{args.questions} NQ-open questions\n")
    print("| model | WikiText-103: word ppl | bits per byte | NQ-open 4-way choice: acc | NQ-open: exact match | "
          "with a passage (windows / contexts / strides) | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "runs": records}, f, indent=2, default=str)


if __name__ == "__main__":
    main()
