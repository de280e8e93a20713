"""``hf-ralm eval-lm``: In-Context RALM perplexity
([`evaluate_perplexity`][hf_ralm.RetrievalAugmentedModel.evaluate_perplexity]), or several passage-selection
strategies side by side (``--compare``:
[`compare_strategies`][hf_ralm.RetrievalAugmentedModel.compare_strategies]), after the run's plan and estimate
(``hf_ralm.evaluation.run_cost``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ..utils.outputs import json_object_with, text_starting_with
from ..runs.shards import is_writer
from .common import fail, parent, print_json, run_options, text_and_model
from .outputs import check_outputs, evaluation_output_dir
from .retrieve import GROUPS

NAME = "eval-lm"
REQUIRED: tuple[str, ...] = ("model", "dataset_path")
"""The flags this command cannot run without (checked before anything loads)."""

HELP = ("In-Context RALM perplexity of a text (token and word level), or several passage-selection strategies side by "
        "side (--compare)")

EVAL_LM_KEYS = ("token_ppl", "word_ppl", "nll_sum", "num_tokens", "num_scored", "num_words", "num_windows",
                "num_windows_with_passage", "retrieved_fraction")
"""What ``eval-lm`` prints of its figures (``eval.json`` has them all)."""


def add_parser(sub) -> None:
    from ..selection.strategies import comparison_rows  # evaluation.compare.STRATEGIES, without torch

    parser = sub.add_parser(NAME, help=HELP, parents=[parent(title) for title in (*GROUPS, "engine")])
    parser.add_argument("--allow-long-run", action="store_true",
                        help="start a CPU run estimated beyond an hour (refused otherwise, with the estimate)")
    parser.add_argument("--compare", metavar="STRATEGIES",
                        help="evaluate these strategies on the same windows from one reader pass and print a table "
                             "(also --output-dir's compare.json and compare.csv): a comma-separated list of "
                             f"{', '.join(comparison_rows())}, e.g. none,top1,lm-gate")
    parser.add_argument("--retrieval-file",
                        help="reuse passages from this retrieval file (paper's JSON format) or retrieval dataset (a "
                             "folder, or hf:REPO_ID on the Hub: refused unless made for this text, tokenizer and "
                             "settings; --retriever fetches passages it holds without texts)")
    parser.add_argument("--save-retrieval-file", help="write the retrievals to this file")
    parser.add_argument("--no-prefix-kv-reuse", action="store_true",
                        help="recompute every window in full instead of reusing a shared passage's keys/values")


def plan_or_refuse(args: argparse.Namespace, model, text: str, compare_k: int | None = None) -> None:
    """Say on stderr what the run will do and how long one window took here (``estimate_run``); a CPU run estimated
    beyond an hour is refused unless ``--allow-long-run``.

    Args:
        args: the parsed flags.
        model: the RALM.
        text: the text to evaluate.
        compare_k: with ``--compare``, the passages per window the pass scores (``None``: a plain run).
    """
    from ..evaluation.run_cost import check_run_length, describe_run, estimate_run

    estimate = estimate_run(model.language_model, model.tokenizer, text, model.config,
                            retrieving=args.retriever != "none" or bool(args.retrieval_file),
                            max_eval_tokens=args.max_eval_tokens, batch_size=args.batch_size,
                            reader_inputs=None if compare_k is None else compare_k + 1)  # k passages and none
    print(f"hf-ralm: {describe_run(estimate)}", file=sys.stderr, flush=True)
    check_run_length(estimate, allow_long_run=args.allow_long_run)


def run(args: argparse.Namespace):
    """The figures of the evaluation, with passages retrieved as it goes or read from ``--retrieval-file``; with
    ``--compare``, the strategies' ``Comparison``."""
    if args.compare is not None:
        return _compare(args)
    from ..evaluation.pipeline import RETRIEVAL_FILE
    from ..retrieval.dataset import is_retrieval_dataset

    check_outputs(args, files=[("--save-retrieval-file", args.save_retrieval_file, RETRIEVAL_FILE, "retrieval file")],
                  folders=[evaluation_output_dir(args)])
    dataset = bool(args.retrieval_file) and is_retrieval_dataset(args.retrieval_file)
    if dataset and args.forbidden_titles and args.retriever == "none":
        fail("--forbidden-titles are checked against the retrieval dataset through the run's retriever: give "
             "--retriever with the index the dataset was made with, or drop --forbidden-titles.")
    # a JSON file's passages are used as they are; a dataset's are checked against the run's retriever (its index and
    # forbidden titles), which also fetches the texts of a dataset that holds only ids
    text, model, load_s = text_and_model(args, "none" if args.retrieval_file and not dataset else args.retriever)
    if dataset:  # a run it was not made for is refused before a window is timed
        from ..evaluation.pipeline import check_retrieval_dataset

        check_retrieval_dataset(model.language_model, model.tokenizer, text, model.retriever, model.config,
                                retrieval_file=args.retrieval_file, max_eval_tokens=args.max_eval_tokens)
    plan_or_refuse(args, model, text)
    result = model.evaluate_perplexity(text, run=run_options(args, load_s), retrieval_file=args.retrieval_file,
                                       max_eval_tokens=args.max_eval_tokens,
                                       reuse_prefix_kv=not args.no_prefix_kv_reuse)
    if args.save_retrieval_file and result.figures["complete"] and is_writer():
        result.save_retrieval_file(args.save_retrieval_file, model.tokenizer)
    print(f"hf-ralm: time in this process: {result.stage_times}", file=sys.stderr, flush=True)
    return result.figures


def _compare(args: argparse.Namespace):
    """``eval-lm --compare``: the strategies' table, written to ``--output-dir``'s compare.json and compare.csv."""
    from ..evaluation.compare import COMPARE_CSV, COMPARE_FILE, StrategyFigures, candidates_per_window, check_strategies

    strategies = check_strategies([name.strip() for name in args.compare.split(",") if name.strip()])
    for flag, given in (("--retrieval-file", args.retrieval_file), ("--save-retrieval-file", args.save_retrieval_file)):
        if given:
            fail(f"--compare runs its own reader pass over the retrieved passages: drop {flag}.")
    if args.retriever == "none":
        fail("--compare needs a retriever (--retriever bm25, ...): each strategy chooses among its passages.")
    header = ",".join(field.name for field in dataclasses.fields(StrategyFigures))
    check_outputs(args, folders=[("--output-dir", args.output_dir, {
        COMPARE_FILE: (json_object_with("rows", "k", "num_resumed_windows"), "strategy comparison"),
        COMPARE_CSV: (text_starting_with(header), "strategy comparison table")})])
    text, model, _ = text_and_model(args, args.retriever)
    plan_or_refuse(args, model, text, compare_k=candidates_per_window(strategies, model.config))
    return model.compare_strategies(text, strategies, max_eval_tokens=args.max_eval_tokens,
                                    run=run_options(args))


def show(result, args: argparse.Namespace) -> None:
    if isinstance(result, dict):  # with the warnings about the figures (nothing retrieved, passages quoting the text)
        print_json(EVAL_LM_KEYS + (("warnings",) if result.get("warnings") else ()), indent=2)(result, args)
    else:
        print(result.to_markdown())
