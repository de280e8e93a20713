"""``hf-ralm eval-qa``: open-domain QA exact match, the paper's §7 ([`evaluate_qa`][hf_ralm.evaluate_qa])."""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..utils.outputs import jsonl_records
from .common import fail, flag_groups, load_model, parent, print_json, run_options
from .outputs import check_outputs

NAME = "eval-qa"
REQUIRED: tuple[str, ...] = ("model", "questions")
"""The flags this command cannot run without (checked before anything loads)."""

HELP = "open-domain QA exact match (the paper's §7)"


def add_parser(sub) -> None:
    from ..evaluation.qa import GOLD_CORPUS_FILE, MAX_NEW_TOKENS
    from .settings import FLAGS

    parser = sub.add_parser(
        NAME, help=HELP,
        parents=[parent(title) for title in ("model", "retriever", "batching", "output", "workers", "engine")],
        description="Open-domain QA as in the paper's §7 and appendix C: --num-docs passages (retrieved with the "
                    "question as the query, or the questions' own 'ctxs' with --use-ctxs) in the prompt, greedy "
                    "answers of --max-new-tokens tokens (first line), exact match.")
    group = parser.add_argument_group("questions and answers")
    group.add_argument("--questions", help="JSONL(.gz), or a Hugging Face dataset (Hub id or folder), with 'question' "
                                           "and 'answers' (or NQ-open's 'answer'), "
                                           "or a JSON list (DPR retriever results)")
    group.add_argument("--use-ctxs", action="store_true",
                       help="take each question's passages from its 'ctxs' (DPR retriever-results format; when they "
                            "are the gold passages, as in nq-open-gold, this is the oracle setting, not retrieval)")
    group.add_argument("--add-gold-to-corpus", action="store_true",
                       help="add the questions' gold passages ('ctxs') to --corpus before it is indexed (written to "
                            f"--output-dir/{GOLD_CORPUS_FILE}): open QA over a sample of Wikipedia finds the answers "
                            "only there")
    group.add_argument(FLAGS["num_docs"], type=int,
                       help="passages in each prompt (default: 1 with --retriever or --use-ctxs, else 0: closed book)")
    group.add_argument(FLAGS["max_questions"], type=int, help="answer only the first N questions")
    group.add_argument("--questions-name", help="with --questions a Hugging Face dataset (e.g. nq_open): its config")
    group.add_argument("--questions-split", default="validation",
                       help="with --questions a Hugging Face dataset: its split (default: %(default)s)")
    group.add_argument(FLAGS["max_new_tokens"], type=int, default=MAX_NEW_TOKENS,
                       help="answer length in tokens (default %(default)s)")
    group.add_argument(FLAGS["max_length"], type=int,
                       help="prompt and answer length in tokens; longer prompts lose their start (default: the "
                            "model's maximum)")
    resuming = parser.add_argument_group("resuming")
    for flag in ("--repair", "--accept-unverified-chunks"):
        resuming.add_argument(flag, **flag_groups()["resuming"][flag])


def run(args: argparse.Namespace) -> dict:
    """Answer the questions and write ``predictions.jsonl`` and ``eval.json``; the figures."""
    from ..core.modeling_utils import model_identity
    from ..evaluation.pipeline import EVAL_REPORT
    from ..evaluation.qa import (
        EVAL_FILE,
        GOLD_CORPUS_FILE,
        PREDICTIONS_FILE,
        check_qa_output_dir,
        default_num_docs,
        evaluate_qa,
        load_questions,
        qa_run_settings,
        write_gold_corpus,
    )

    if args.output_dir:  # before the gold passages are written there
        check_qa_output_dir(args.output_dir)
    check_outputs(args, folders=[("--output-dir", args.output_dir, {
        EVAL_FILE: (EVAL_REPORT, "QA report"),
        PREDICTIONS_FILE: (jsonl_records(lambda row: isinstance(row, dict) and "prediction" in row), "QA predictions"),
        GOLD_CORPUS_FILE: (jsonl_records(lambda row: isinstance(row, dict) and str(row.get("id")).startswith(
            "nq-gold-")), "gold passages file")})])
    if args.use_ctxs and args.retriever != "none":
        fail("--use-ctxs takes the passages from the questions file: drop --retriever (or drop --use-ctxs).")
    num_docs = default_num_docs(args.num_docs, args.use_ctxs, args.retriever != "none")
    if num_docs and not args.use_ctxs and args.retriever == "none":
        fail("open-book QA (--num-docs > 0) needs --retriever (with --index-dir/--corpus) or --use-ctxs; "
             "--num-docs 0 is closed book.")
    examples = load_questions(args.questions, args.max_questions, args.questions_name, args.questions_split)
    if not examples:
        fail(f"no questions in {args.questions}.")
    if args.add_gold_to_corpus:
        causes = [cause for cause, wrong in (
            ("--num-docs 0 is closed book: no prompt would get a passage", not num_docs),
            ("--use-ctxs takes the passages from the questions file", args.use_ctxs),
            ("it needs --retriever", args.retriever == "none"),
            ("it needs --corpus", not args.corpus),
            ("it needs --output-dir (where the gold passages are written)", not args.output_dir)) if wrong]
        if causes:
            fail(f"--add-gold-to-corpus adds the gold passages to the retrieval corpus, but {causes[0]}.")
        gold = os.path.join(args.output_dir, GOLD_CORPUS_FILE)
        if not write_gold_corpus(examples, gold)["num_passages"]:
            fail(f"--add-gold-to-corpus: the questions in {args.questions} have no gold passages ('ctxs').")
        args.corpus = [*args.corpus, gold]
    if args.use_ctxs:
        print("hf-ralm: --use-ctxs puts each question's own 'ctxs' in its prompt; with gold passages that is the "
              "oracle setting (the answer's passage is given), not retrieval.", file=sys.stderr)
    t0 = time.perf_counter()
    model = load_model(args, {}, args.retriever if num_docs else "none")  # closed book: no index to load
    load_s = time.perf_counter() - t0
    settings = qa_run_settings(model=args.model, dtype=model.language_model.dtype, num_docs=num_docs,
                               retriever=args.retriever, tokenizer=args.tokenizer, gguf_file=args.gguf_file,
                               corpus=args.corpus, index_dir=args.index_dir, forbidden_titles=args.forbidden_titles,
                               reader_identity=model_identity(model.language_model))  # an engine reader: its options
    return evaluate_qa(model.language_model, model.tokenizer, examples, retriever=model.retriever,
                       num_docs=num_docs, use_ctxs=args.use_ctxs, max_new_tokens=args.max_new_tokens,
                       max_length=args.max_length, settings=settings,
                       run=run_options(args, load_s))


show = print_json(("em", "has_answer", "num_questions", "num_correct", "num_has_answer", "num_truncated",
                   "num_resumed"), indent=2)
