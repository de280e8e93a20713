"""The ``hf-ralm`` command line: ``index`` (corpus → index), ``retrieve`` (dataset → retrieval file),
``eval-lm`` (perplexity), ``generate`` (text with its sources), ``eval-qa`` (open-domain QA exact match),
``rerank-data`` and ``train-reranker`` (the predictive reranker's training data, and its training), ``lm-eval``
(lm-evaluation-harness with the ``ralm`` model).

The command line only parses: each command is one module here (its parser, then parse → one library call → print),
built from the flag groups it uses (argparse parent parsers: model, retriever, RALM settings, passages, dataset,
batching, output, ``hf_ralm.cli.common``), so ``--help`` lists exactly what a command takes. The RALM settings'
flags are generated from ``hf_ralm.config.settings`` (``hf_ralm.cli.settings``: their defaults, types and
help have one source with [`RalmConfig`][hf_ralm.RalmConfig], read without transformers); the
checks live in the library, and ``FLAGS`` names their arguments as flags.
Every usage error ends with one line ``hf-ralm: error: ...`` and exit status 2: the library's errors for bad input (a
``ValueError`` such as [`InputError`][hf_ralm.errors.InputError], an ``OSError``) name the file or the setting, and
``main`` prints them, naming settings by their flags (``error_message``); ``--debug`` (before or after the
command) prints the traceback first.

Examples:
    ```bash
    hf-ralm eval-lm --model HuggingFaceTB/SmolLM2-135M --dataset-path test.jsonl --retriever bm25 \\
        --corpus wiki.jsonl.gz --index-dir wiki-index --max-length 512 --max-eval-tokens 2048 --output-dir out/
    ```
"""

from __future__ import annotations

import argparse
import importlib
import logging
import shlex
import sys
import traceback
import warnings
from contextlib import contextmanager
from importlib import metadata
from typing import Callable, Iterator

from ..errors import RalmWarning
from ..utils.lazy import lazy_exports
from ..utils.progress import transformers_bars
from ..runs.shards import Shard
from . import eval_lm, eval_qa, generate, index, lm_eval, rerank_data, retrieve, train_reranker
from .common import DEBUG_HELP, Parser, check_args, error_message, fail, use_saved_settings

# the RALM settings' flags (the strategies' registry, numpy): imported when first used, not by ``hf-ralm --help``
__getattr__, __dir__ = lazy_exports(__name__, {"settings": ("FLAGS", "add_ralm_arguments", "ralm_settings")})

__all__ = ["main", "build_parser", "error_message", "FLAGS", "add_ralm_arguments", "ralm_settings"]

COMMANDS = {command.NAME: command for command in (index, retrieve, eval_lm, generate, eval_qa, rerank_data,
                                                  train_reranker)}
"""Each command's module: its name and one-line help (``NAME``, ``HELP``), its parser (``add_parser(sub)``), what it
runs (``run(args)``) and how its result is printed (``show(result, args)``); ``lm-eval`` hands its arguments to
lm-evaluation-harness (``hf_ralm.cli.lm_eval``). A module imports the library when its parser is made or it runs,
so that ``hf-ralm --help``, ``--version`` and the top-level usage errors load neither torch nor transformers."""

RESUMABLE = ("eval-lm", "retrieve", "rerank-data", "eval-qa")
"""The commands whose --output-dir keeps complete chunks that a rerun resumes."""
SHARDED = (*RESUMABLE, "index")
"""The commands many workers share (--num-shards, torchrun, a Slurm array)."""


def version_line() -> str:
    """What ``hf-ralm --version`` prints: hf-ralm's version and those of the libraries that decide its results (read
    from the installed packages' metadata: neither is imported)."""
    from .. import __version__

    return f"hf-ralm {__version__} (transformers {_installed('transformers')}, torch {_installed('torch')})"


def _installed(package: str) -> str:
    """The version of an installed package, from its metadata (the package itself imported only when it has none:
    a build without it)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return importlib.import_module(package).__version__


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-ralm`` parser: one subcommand each, made of the flag groups it uses (the strategies' choices and help
    read now, so that a strategy registered since import is offered)."""
    return _parser(lambda sub, command: command.add_parser(sub))


def _commands_parser(full: str | None = None) -> argparse.ArgumentParser:
    """The ``hf-ralm`` parser with the commands' names and help but none of their flags, except those of the command
    ``full``. Without ``full``, what ``main`` parses first: it answers ``--help``, ``--version`` and a missing or
    unknown command exactly as ``build_parser`` does, before any command's flags (whose defaults and choices
    are read from the library) are made, and names the command; with it, what parses that command's flags, as
    ``build_parser`` would, without importing what the other commands' flags need.

    Examples:
        >>> _commands_parser().parse_known_args(["eval-lm", "--stride", "0"])[0].command
        'eval-lm'
        >>> _commands_parser("eval-lm").parse_args(["eval-lm", "--stride", "8"]).stride
        8
    """
    def add(sub: argparse._SubParsersAction, command) -> None:
        if command.NAME == full:
            command.add_parser(sub)
        else:
            sub.add_parser(command.NAME, help=command.HELP, add_help=False)

    return _parser(add)


def _parser(add_command: Callable[[argparse._SubParsersAction, object], None]) -> argparse.ArgumentParser:
    """The top-level parser, each command's subparser made by ``add_command(sub, module)``."""
    parser = Parser(prog="hf-ralm", description="In-Context RALM for Hugging Face causal LMs.")
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (*COMMANDS.values(), lm_eval):
        add_command(sub, command)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    for command in sub.choices.values():  # also after the command; SUPPRESS: not given there keeps the first one
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run ``hf-ralm`` with ``argv`` (default: this process's arguments), e.g.
    ``main(["eval-lm", "--model", "gpt2", "--dataset-path", "test.jsonl"])``."""
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


def _start_workers(args: argparse.Namespace) -> Shard:
    """This process's shard of the run (``Shard``), announced on stderr before any work
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


def _main(argv: list[str] | None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [lm_eval.NAME]:  # lm-eval parses the rest: its flags are its own
        return lm_eval.run(argv[1:])
    named = _commands_parser().parse_known_args(argv)[0].command  # --help, --version, no or an unknown command: here
    args = _commands_parser(named).parse_args(argv)
    args.command_line = shlex.join(["hf-ralm", *argv])  # what reproduces a run
    command = COMMANDS[args.command]
    try:  # everything that may raise hf-ralm's errors, the workers' start too (--num-shards 0, --shard-id 5)
        check_args(args, *command.REQUIRED)  # before anything loads: a missing flag, counts, corpus files
        if args.command in SHARDED:
            _start_workers(args)
        use_saved_settings(args)  # --model SAVED_RALM: the flags not given take the folder's values
        with transformers_bars():  # its "Loading weights" too: no cursor codes in a log
            result = command.run(args)
        command.show(result, args)
    except (ValueError, OSError, ImportError) as error:  # bad input: the library's message names the file or setting
        if args.debug:
            traceback.print_exc()
        fail(error_message(error))
    except KeyboardInterrupt:  # Ctrl-C: the chunks saved in --output-dir are complete, the one in progress is lost
        if args.debug:
            traceback.print_exc()
        saved = " (--output-dir holds complete chunks only: run the same command to resume)" \
            if getattr(args, "output_dir", None) and args.command in RESUMABLE else ""
        print(f"hf-ralm: interrupted{saved}", file=sys.stderr)
        sys.exit(130)
