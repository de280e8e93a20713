"""What every command checks of the paths it writes, first (before its model or data is loaded): no input is an output
(``hf_ralm.utils.outputs``). Each output file and folder is refused when it is one of the command's input files
(``INPUT_FLAGS``, links resolved) or cannot be written to; an output file, or a final file of an output folder
(``eval.json``), when it exists but hf-ralm did not write it, or is a symbolic link, a device or a FIFO; an output
folder that holds a symbolic link. A file hf-ralm wrote is replaced (a rerun), and the
command says so when it writes it.

Examples:
    ```python
    check_outputs(args, files=[("--output-json", args.output_json, GENERATED_TEXTS, "generation output")])
    ```
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Mapping, Sequence

from ..utils.outputs import (OUTPUT_FOLDER_PURPOSE, InputPaths, Recogniser, check_no_links, check_not_an_input,
                             check_output_file, check_replaceable, check_writable)

INPUT_FLAGS = ("model", "tokenizer", "gguf_file", "dataset_path", "corpus", "index_dir", "encoder",
               "forbidden_titles", "retrieval_file", "prompts_file", "questions", "articles", "exclude_titles")
"""The ``args`` of the paths a command reads (those it has)."""

FinalFiles = Mapping[str, "tuple[Recogniser, str]"]
"""An output folder's final files: name → (how to tell the one hf-ralm wrote, what it is)."""


def command_inputs(args: argparse.Namespace) -> InputPaths:
    """The input paths of a command's ``args``, by flag (only those given)."""
    return {f"--{name.replace('_', '-')}": getattr(args, name) for name in INPUT_FLAGS if getattr(args, name, None)}


def check_outputs(args: argparse.Namespace, *, files: Sequence[tuple[str, str | None, Recogniser, str]] = (),
                  folders: Sequence[tuple[str, str | None, FinalFiles]] = ()) -> None:
    """Before any work: each output file ``(flag, path, recogniser, what)`` given is no input of the command, its folder
    can be written to, and it is missing or a ``what`` hf-ralm wrote (``hf_ralm.utils.outputs.check_output_file``, which
    says when it is replaced); each output folder ``(flag, path, final files)`` given is no input, can be made or
    written to, and its final files are no inputs and missing or hf-ralm's (replaced when the run writes them)."""
    inputs = command_inputs(args)
    for flag, folder, final in folders:
        if not folder:
            continue
        check_not_an_input(folder, flag, inputs)
        check_writable(folder, flag, OUTPUT_FOLDER_PURPOSE)
        if os.path.isdir(folder):  # what the run writes there, not through a link out of it
            check_no_links(folder, os.listdir(folder), f"remove the link, or give another {flag}")
        for name, (hf_ralm_wrote, what) in final.items():
            path = Path(folder, name)
            check_not_an_input(path, flag, inputs)
            check_replaceable(path, hf_ralm_wrote, what, f"give another {flag}, or move the file away")
    for flag, path, hf_ralm_wrote, what in files:
        if path:
            check_output_file(path, flag, hf_ralm_wrote, what, inputs=inputs)


def evaluation_output_dir(args: argparse.Namespace) -> tuple[str, str | None, FinalFiles]:
    """``--output-dir`` of ``retrieve`` and ``eval-lm`` for ``check_outputs``: its final ``eval.json``."""
    from ..evaluation.pipeline import EVAL_REPORT
    from ..evaluation.window_records import EVAL_FILE

    return "--output-dir", args.output_dir, {EVAL_FILE: (EVAL_REPORT, "evaluation report")}
