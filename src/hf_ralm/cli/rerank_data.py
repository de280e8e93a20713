"""``hf-ralm rerank-data``: the predictive reranker's training data, collected with the reader
([`collect_rerank_data`][hf_ralm.reranker_training.collect_rerank_data])."""

from __future__ import annotations

import argparse
import os

from .common import fail, flag_groups, load_model, parent, print_json, run_options
from .outputs import check_outputs

NAME = "rerank-data"
REQUIRED: tuple[str, ...] = ("model", "articles", "output_dir")
"""The flags this command cannot run without (checked before anything loads)."""

HELP = "collect the predictive reranker's training data with the reader"


def add_parser(sub) -> None:
    from ..reranker_training.defaults import CHUNK_SIZE, WINDOWS_PER_ARTICLE
    from .settings import FLAGS, add_ralm_arguments

    parser = sub.add_parser(
        NAME, help=HELP,
        parents=[parent(title) for title in ("model", "retriever", "RALM settings", "passages in context", "batching",
                                             "workers", "engine")],
        description="For training articles, the reader's log-probability of each window's next --stride tokens "
                    "under each of its --rerank-candidates retrieved passages (the article's own passages "
                    "excluded): the predictive reranker's training data (hf-ralm train-reranker). A rerun with the "
                    "same settings computes only the windows --output-dir does not hold yet; workers share a run "
                    "with --num-shards/--shard-id (or under torchrun or a Slurm array).")
    add_ralm_arguments(parser, settings=("rerank_candidates", "rerank_tokens"), helps={"rerank_tokens": (
        "s': recorded with the data for the reranker's card; the reranker reads the --query-length query "
        "(default %(default)s)")})
    group = parser.add_argument_group("training articles")
    group.add_argument("--articles", help="corpus-format JSONL(.gz) or TSV (id, title, text) of the training "
                                          "articles, used in file order (e.g. the retrieval corpus itself)")
    group.add_argument("--exclude-titles", action="append",
                       help="file of titles (one per line) of articles never to train on, e.g. the evaluation "
                            "articles and WikiText-103's forbidden_titles.txt; their passages are never retrieved "
                            "either; may repeat")
    group.add_argument(FLAGS["num_articles"], type=int,
                       help="use only the first N articles left after --exclude-titles (default: all)")
    group.add_argument(FLAGS["windows_per_article"], type=int,
                       default=WINDOWS_PER_ARTICLE,
                       help="windows per article, spread evenly over it (default %(default)s)")
    group.add_argument(FLAGS["max_windows"], type=int,
                       help="stop once the folder holds this many windows (default: all articles)")
    group = parser.add_argument_group("output")
    group.add_argument("--output-dir", help="the rerank data folder (rerank_data.json and chunks; required)")
    group.add_argument(FLAGS["chunk_size"], type=int, default=CHUNK_SIZE,
                       help="windows per saved chunk: what a crash can lose at most (default %(default)s)")
    group.add_argument("--overwrite", action="store_true",
                       help="delete the folder's data first when it was made with other settings")
    for flag in ("--repair", "--accept-unverified-chunks"):
        group.add_argument(flag, **flag_groups()["resuming"][flag])


def run(args: argparse.Namespace) -> dict:
    """The predictive reranker's training data in ``--output-dir``; its summary."""
    from ..reranker_training import TrainingTitles, articles_source, collect_rerank_data, training_articles
    from .settings import ralm_settings

    if args.retriever == "none":
        fail("rerank-data ranks retrieved passages: give --retriever (with --index-dir and/or --corpus).")
    for path in [args.articles, *(args.exclude_titles or [])]:
        if not os.path.isfile(path):
            fail(f"file not found: {path}")
    check_outputs(args, folders=[("--output-dir", args.output_dir, {})])
    settings = ralm_settings(args)
    titles = TrainingTitles.from_files(args.exclude_titles or [], args.forbidden_titles)
    model = load_model(args, settings, args.retriever, forbidden_titles=titles.forbidden)  # never retrieved either
    articles = training_articles(args.articles, exclude_titles=titles.excluded, num_articles=args.num_articles)
    return collect_rerank_data(
        model.language_model, model.tokenizer, model.retriever, articles, model.config, output_dir=args.output_dir,
        windows_per_article=args.windows_per_article, max_windows=args.max_windows,
        metadata=articles_source(args.articles, args.num_articles, titles.excluded),
        reproduce={"articles": os.path.abspath(args.articles), "command": args.command_line},
        run=run_options(args))


show = print_json()
