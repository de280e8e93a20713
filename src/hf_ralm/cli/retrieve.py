"""``hf-ralm retrieve``: every evaluation window's retrieved passages (and, reranked or gated, the choices) as a
retrieval file or a Hugging Face dataset ([`evaluate`][hf_ralm.evaluate] without scoring)."""

from __future__ import annotations

import argparse
import shlex
import sys

from ..runs.shards import is_writer
from .common import add_flags, fail, parent, print_json, run_options, text_and_model
from .outputs import check_outputs, evaluation_output_dir

NAME = "retrieve"
REQUIRED: tuple[str, ...] = ("model", "dataset_path")
"""The flags this command cannot run without (checked before anything loads)."""

HELP = ("write a retrieval file or dataset (with --rerank or --retrieval-gate: also the choices, ranking NLLs and gate "
        "scores)")

GROUPS = ("model", "retriever", "RALM settings", "passages in context", "several passages", "reranking",
          "retrieval gate", "dataset", "batching", "output", "resuming", "workers")
"""The flag groups of ``retrieve`` and ``eval-lm``, in their ``--help`` order."""


OUTPUTS = {
    "--save-retrieval-file": {"help": "write the retrievals to this file (the paper's JSON format)"},
    "--save-retrieval-dataset": {
        "metavar": "DIR",
        "help": "write the retrievals as a Hugging Face dataset folder (Parquet, one row per window; the "
                "fingerprint of the text, tokenizer, index and settings they depend on; a dataset card), which "
                "eval-lm --retrieval-file DIR reads (hf:REPO_ID once pushed)"},
    "--no-passage-texts": {
        "action": "store_true",
        "help": "leave the passages' texts out of --save-retrieval-dataset (ids, titles, scores): eval-lm fetches "
                "them by id from its --retriever's index"},
    "--push-to-hub": {
        "metavar": "REPO_ID",
        "help": "publish the --save-retrieval-dataset folder to this Hub dataset repository (created when missing; "
                "log in first: hf auth login)"},
}
"""What ``retrieve`` writes, and where."""


def add_parser(sub) -> None:
    parser = sub.add_parser(NAME, help=HELP, parents=[parent(title) for title in GROUPS])
    add_flags(parser, OUTPUTS)


def run(args: argparse.Namespace) -> dict:
    """The retrievals written to ``--save-retrieval-file`` (JSON) and/or ``--save-retrieval-dataset`` (a Hugging Face
    dataset folder, published with ``--push-to-hub``); the run's figures."""
    from ..config.configuration_ralm import RalmConfig
    from ..evaluation.pipeline import RETRIEVAL_FILE, evaluate
    from ..retrieval.dataset import check_dataset_folder, push_retrieval_dataset
    from ..selection.strategies import reader_ranks
    from .settings import ralm_settings

    if not args.save_retrieval_file and not args.save_retrieval_dataset:
        fail("hf-ralm retrieve needs --save-retrieval-file OUT (the paper's JSON) or --save-retrieval-dataset DIR "
             "(a Hugging Face dataset), or both.")
    if args.save_retrieval_dataset:
        if args.retriever == "none":
            fail("--save-retrieval-dataset records what a retriever found: give --retriever (with --index-dir "
                 "and/or --corpus).")
        check_dataset_folder(args.save_retrieval_dataset)  # before the run, not after it
    for flag, given in (("--no-passage-texts", args.no_passage_texts), ("--push-to-hub", args.push_to_hub)):
        if given and not args.save_retrieval_dataset:
            fail(f"{flag} is about the dataset of --save-retrieval-dataset DIR: give one.")
    check_outputs(args, files=[("--save-retrieval-file", args.save_retrieval_file, RETRIEVAL_FILE, "retrieval file")],
                  folders=[("--save-retrieval-dataset", args.save_retrieval_dataset, {}), evaluation_output_dir(args)])
    # the reader's weights only when it ranks: retrieval itself needs its tokenizer and maximum length
    text, model, load_s = text_and_model(args, args.retriever, reader_ranks(RalmConfig(**ralm_settings(args))))
    result = evaluate(model.language_model, model.tokenizer, text, model.retriever, model.config,
                      run=run_options(args, load_s), max_eval_tokens=args.max_eval_tokens, reranker=model.reranker,
                      score=False)
    if result.figures["complete"] and is_writer():
        if args.save_retrieval_file:
            result.save_retrieval_file(args.save_retrieval_file, model.tokenizer)
        if args.save_retrieval_dataset:
            result.save_retrieval_dataset(args.save_retrieval_dataset, model.tokenizer,
                                          passage_texts=not args.no_passage_texts, repo_id=args.push_to_hub,
                                          argv=shlex.split(args.command_line))
        if args.push_to_hub:
            url = push_retrieval_dataset(args.save_retrieval_dataset, args.push_to_hub)
            print(f"hf-ralm: pushed {args.save_retrieval_dataset} to the Hub dataset {args.push_to_hub}: {url}",
                  file=sys.stderr)
    return result.figures


show = print_json(("num_windows", "num_windows_with_passage", "retrieved_fraction"))
