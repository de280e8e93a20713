"""Evaluation texts: JSONL rows joined as the reference joins the HF ``wikitext`` rows, plain text files, and HF
datasets; what ``hf-ralm eval-lm``/``retrieve`` and the benchmarks evaluate.

Example:
    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write("\\n".join(json.dumps({"text": t}) for t in [" = Rome = \\n", "", " Rome was ...\\n"]))
    >>> load_dataset_text(path)
    ' = Rome = \\n \\n Rome was ...\\n'
"""

from __future__ import annotations

import json
from typing import Iterable

from ..errors import InputError, MissingFileError, setting
from ..utils.checks import is_input_file, reading
from ..utils.datasets_io import load_hf_dataset
from ..utils.paths import missing_local_path


def join_rows(rows: Iterable[str]) -> str:
    """Join dataset rows (e.g. the HF ``wikitext`` splits) the way the reference does: empty rows become ``" \\n"``."""
    return "".join(row if row else " \n" for row in rows)


def _row_text(path: str, line_number: int, line: str) -> str:
    """The ``text`` of one JSONL row of a dataset file."""
    try:
        row = json.loads(line)
    except ValueError:
        row = None  # not JSON
    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
        raise InputError(f"{path}:{line_number}: a dataset row must be a JSON object with a 'text' string, got "
                         f"{line.strip()[:80]!r}: fix or remove that line.")
    return row["text"]


def load_dataset_text(path: str, name: str | None = None, split: str = "test") -> str:
    """The evaluation text at ``path``: a ``.jsonl``/``.jsonl.gz`` file of rows with a ``text`` field, joined as the
    reference joins dataset rows (:func:`join_rows`: an empty row becomes ``" \\n"``), any other file
    as plain text, or else a HF dataset (Hub id or folder, config ``name``, ``split``) whose ``text`` column is
    joined the same way.

    Raises:
        FileNotFoundError: ``path`` is neither a file nor a dataset ``datasets.load_dataset`` can load.
        InputError: a JSONL line that is no object with a ``text`` string, or bytes that are not UTF-8 (the message
            names the file and the line); a damaged gzip file, a FIFO or a device (:func:`~hf_ralm.utils.checks.
            reading`).
    """
    if missing_local_path(path):  # not the Hub's retries for a mistyped file name
        raise MissingFileError(f"The {setting('dataset_path')} {path!r} does not exist: give a .jsonl/.jsonl.gz file "
                               "of rows with a 'text' field, a text file, or a Hugging Face dataset id (e.g. wikitext "
                               f"with {setting('dataset_name')} wikitext-103-raw-v1).")
    if is_input_file(path, "dataset"):  # a folder is a dataset's; a FIFO is refused before anything waits on it
        with reading(path, InputError, "dataset") as f:
            if path.endswith((".jsonl", ".jsonl.gz")):
                return join_rows(_row_text(path, number, line) for number, line in enumerate(f, 1) if line.strip())
            return f.read()
    return join_rows(load_hf_dataset(path, name, split)["text"])
