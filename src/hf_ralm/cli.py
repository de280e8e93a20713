"""The ``hf-ralm`` command line: ``index`` (corpus → index), ``retrieve`` (dataset → retrieval file),
``eval-lm`` (perplexity).

Example::

    hf-ralm eval-lm --model HuggingFaceTB/SmolLM2-135M --dataset-path test.jsonl --retriever bm25 \\
        --corpus wiki.jsonl.gz --index-dir wiki-index --max-length 512 --max-eval-tokens 2048 --output-dir out/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .retrieval.files import write_json_atomic


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="causal LM: Hub id or local folder (also a saved RALM folder)")
    parser.add_argument("--tokenizer", help="tokenizer id/folder if different from --model")
    parser.add_argument("--gguf-file", help="load the model from this GGUF file inside --model")
    parser.add_argument("--dataset-path", help="rows with a 'text' field (.jsonl), a plain text file, or a HF dataset")
    parser.add_argument("--dataset-name", help="HF dataset config name (e.g. wikitext-103-v1)")
    parser.add_argument("--dataset-split", default="test", help="HF dataset split (default: test)")
    parser.add_argument("--retriever", default="none", choices=["none", "bm25"])
    parser.add_argument("--corpus", action="append", help="retrieval corpus (JSONL/JSONL.gz/TSV); may repeat")
    parser.add_argument("--index-dir", help="index folder: built there if missing, reused if built from --corpus")
    parser.add_argument("--forbidden-titles", help="file of article titles never to retrieve (contamination)")
    parser.add_argument("--stride", type=int, default=4, help="retrieval stride s (default 4)")
    parser.add_argument("--query-length", type=int, default=32, help="query length ℓ in tokens (default 32)")
    parser.add_argument("--max-length", type=int, help="window length L (default: the model's maximum)")
    parser.add_argument("--max-doc-tokens", type=int, default=256, help="passage length cap (default 256)")
    parser.add_argument("--num-docs", type=int, default=1, help="passages retrieved per query (default 1)")
    parser.add_argument("--max-eval-tokens", type=int, help="evaluate only the first T tokens of the dataset")
    parser.add_argument("--bos-every-window", action="store_true",
                        help="put BOS at the start of every window (fair baseline for BOS-sensitive models)")
    parser.add_argument("--retrieval-file", help="reuse passages from this retrieval file (paper's JSON format)")
    parser.add_argument("--save-retrieval-file", help="write the retrievals to this file")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--device", help="device for the model (default: cuda if available, else cpu)")
    parser.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (default 8)")
    parser.add_argument("--no-prefix-kv-reuse", action="store_true",
                        help="recompute every window in full instead of reusing a shared passage's keys/values")
    parser.add_argument("--output-dir", help="where eval.json goes")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-ralm", description="In-Context RALM for Hugging Face causal LMs.")
    sub = parser.add_subparsers(dest="command", required=True)
    index = sub.add_parser("index", help="build a BM25 index from a corpus")
    index.add_argument("--corpus", action="append", required=True, help="JSONL/JSONL.gz/TSV corpus; may repeat")
    index.add_argument("--index-dir", required=True)
    index.add_argument("--retriever", default="bm25", choices=["bm25"])
    index.add_argument("--words-per-passage", type=int, default=100, help="0 keeps rows as passages (default 100)")
    for name in ("retrieve", "eval-lm"):
        _add_common(sub.add_parser(name, help="write a retrieval file" if name == "retrieve" else "perplexity"))
    return parser


def _fail(message: str) -> None:
    print(f"hf-ralm: error: {message}", file=sys.stderr)
    sys.exit(2)


def load_dataset_text(path: str, name: str | None = None, split: str = "test") -> str:
    """The evaluation text: JSONL rows joined as the reference joins the HF wikitext rows, a plain text file as is,
    or a HF dataset (by name or folder) with a 'text' column."""
    from .windows import join_rows

    if os.path.isfile(path):
        if path.endswith((".jsonl", ".jsonl.gz")):
            import gzip

            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as f:
                return join_rows(json.loads(line)["text"] for line in f if line.strip())
        with open(path, encoding="utf-8") as f:
            return f.read()
    from datasets import load_dataset

    try:
        rows = load_dataset(path, name, split=split)
    except Exception as error:  # datasets raises several types for a missing dataset
        raise FileNotFoundError(f"Dataset {path!r} is neither a file nor a loadable HF dataset: {error}") from error
    return join_rows(rows["text"])


def _check_args(args) -> None:
    for name in ("stride", "query_length", "max_doc_tokens", "num_docs", "batch_size"):
        if getattr(args, name) < 1:
            _fail(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}.")
    if args.max_length is not None and args.max_length <= args.stride:
        _fail(f"--max-length ({args.max_length}) must be larger than --stride ({args.stride}).")
    if not args.model:
        _fail("--model is required.")
    if not args.dataset_path:
        _fail("--dataset-path is required.")
    for corpus in args.corpus or []:
        if not os.path.isfile(corpus):
            _fail(f"corpus file not found: {corpus}")
    if args.retriever == "bm25" and not args.retrieval_file and not args.index_dir:
        _fail("--retriever bm25 needs --index-dir (and --corpus to build the index there).")


def _load_model(args):
    import torch

    from .modeling_ralm import RetrievalAugmentedModel

    model_kwargs = {"dtype": getattr(torch, args.dtype)}
    if args.gguf_file:
        model_kwargs["gguf_file"] = args.gguf_file
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    retriever = "none" if args.retrieval_file else args.retriever
    model = RetrievalAugmentedModel.from_pretrained(
        args.model, retriever=retriever, tokenizer=tokenizer, index_dir=args.index_dir, corpus=args.corpus,
        forbidden_titles=args.forbidden_titles, retrieval_stride=args.stride, query_length=args.query_length,
        max_length=args.max_length, max_doc_tokens=args.max_doc_tokens, num_docs=args.num_docs,
        bos_every_window=args.bos_every_window, **model_kwargs,
    )
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model.language_model.to(device)
    return model


def run_eval(args, score: bool) -> dict:
    _check_args(args)
    text = load_dataset_text(args.dataset_path, args.dataset_name, args.dataset_split)
    if not text.strip():
        _fail(f"the dataset {args.dataset_path} is empty.")
    t0 = time.perf_counter()
    model = _load_model(args)
    load_s = time.perf_counter() - t0
    if score:
        result = model.evaluate_perplexity(
            text, retrieval_file=args.retrieval_file, max_eval_tokens=args.max_eval_tokens,
            batch_size=args.batch_size, reuse_prefix_kv=not args.no_prefix_kv_reuse,
        )
    else:
        from .evaluation import evaluate_retrieval

        result = evaluate_retrieval(model.language_model, model.tokenizer, text, model.retriever, model.config,
                                    max_eval_tokens=args.max_eval_tokens)
    if args.save_retrieval_file:
        write_json_atomic(args.save_retrieval_file, result.retrieval_records(model.tokenizer))
    report = {**result.figures, "timings": {"load_s": load_s, **result.timings}, "args": vars(args)}
    if args.output_dir:
        write_json_atomic(os.path.join(args.output_dir, "eval.json"), report)
    return report


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "index":
            from .retrieval.bm25 import BM25Retriever

            retriever = BM25Retriever.build_or_load(args.corpus, args.index_dir,
                                                    words_per_passage=args.words_per_passage)
            print(json.dumps({"index_dir": args.index_dir, "num_passages": len(retriever)}))
        elif args.command == "retrieve":
            if not args.save_retrieval_file:
                _fail("hf-ralm retrieve needs --save-retrieval-file OUT.")
            report = run_eval(args, score=False)
            print(json.dumps({k: report[k] for k in ("num_windows", "num_windows_with_passage")}))
        else:
            report = run_eval(args, score=True)
            keys = ("token_ppl", "word_ppl", "nll_sum", "num_tokens", "num_scored", "num_words", "num_windows",
                    "num_windows_with_passage")
            print(json.dumps({k: report[k] for k in keys}, indent=2))
    except (FileNotFoundError, ValueError, OSError) as error:
        _fail(str(error))


if __name__ == "__main__":
    main()
