"""Evaluation texts: JSONL rows joined as the reference joins the HF ``wikitext`` rows, plain text files, and HF
datasets; what ``hf-ralm eval-lm``/``retrieve`` and the benchmarks evaluate.

Examples:
    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write("\\n".join(json.dumps({"text": t}) for t in [" = Rome = \\n", "", " Rome was ...\\n"]))
    >>> load_dataset_text(path)
    ' = Rome = \\n \\n Rome was ...\\n'
"""

from __future__ import annotations

import json
import os
from typing import Iterable

from ..errors import InputError, MissingFileError, setting
from ..utils.checks import check_json_text, is_input_file, reading
from ..utils.datasets_io import load_hf_dataset
from ..utils.paths import missing_local_path


def join_rows(rows: Iterable[str]) -> str:
    """Join dataset rows (e.g. the HF ``wikitext`` splits) the way the reference does.

    Args:
        rows: the rows' texts, in order.

    Returns:
        The rows concatenated, an empty row becoming ``" \\n"``.

    Examples:
        >>> join_rows([" = Rome = \\n", "", " Rome was ...\\n"])
        ' = Rome = \\n \\n Rome was ...\\n'
    """
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
    check_json_text(row["text"], line, f"{path}:{line_number}")
    return row["text"]


def load_dataset_text(path: str, name: str | None = None, split: str = "test") -> str:
    """The evaluation text at ``path``.

    Args:
        path: a ``.jsonl``/``.jsonl.gz`` file of rows with a ``text`` field, any other file (read as plain text), or
            else a HF dataset (a Hub id or a folder).
        name: the HF dataset's config (e.g. ``wikitext-103-raw-v1``).
        split: the HF dataset's split.

    Returns:
        The text: a JSONL file's rows or a dataset's ``text`` column joined as the reference joins dataset rows
            ([`join_rows`][hf_ralm.join_rows]), or the plain file's text.

    Raises:
        FileNotFoundError: ``path`` is neither a file nor a dataset ``datasets.load_dataset`` can load.
        InputError: a JSONL line that is no object with a ``text`` string, or bytes that are not UTF-8 (the message
            names the file and the line); a damaged gzip file, a FIFO or a device; a retrieval file (``hf-ralm
            retrieve``'s, whose JSON would be evaluated as text); a plain folder without the split asked for (the
            message says what it holds).
    """
    if missing_local_path(path):  # not the Hub's retries for a mistyped file name
        raise MissingFileError(f"The {setting('dataset_path')} {path!r} does not exist: give a .jsonl/.jsonl.gz file "
                               "of rows with a 'text' field, a text file, or a Hugging Face dataset id (e.g. wikitext "
                               f"with {setting('dataset_name')} wikitext-103-raw-v1).")
    if is_input_file(path, "dataset"):  # a folder is a dataset's; a FIFO is refused before anything waits on it
        with reading(path, InputError, "dataset") as f:
            if path.endswith((".jsonl", ".jsonl.gz")):
                return join_rows(_row_text(path, number, line) for number, line in enumerate(f, 1) if line.strip())
            text = f.read()
        _check_not_a_retrieval_file(path, text)
        return text
    try:
        return join_rows(load_hf_dataset(path, name, split)["text"])
    except ValueError as error:  # the split asked for is not there
        if not os.path.isdir(path):
            raise
        names = sorted(os.listdir(path))
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise InputError(f"The {setting('dataset_path')} {path!r} is a folder (of {shown or 'nothing'}), which the "
                         f"datasets library read as a dataset: {error} {setting('dataset_path')} takes a .jsonl file "
                         "of rows with a 'text' field, a text file, or a Hugging Face dataset (a Hub id or a folder "
                         f"of one) with its {setting('dataset_name')} and {setting('dataset_split')}.") from None


RETRIEVAL_FILE_KEYS = ("begin_location", "end_location", "retrieved_docs")
"""The keys that tell a retrieval file's window ([`hf_ralm.retrieval.files`][hf_ralm.retrieval.files]) from a dataset
row."""


def _check_not_a_retrieval_file(path: str, text: str) -> None:
    """Refuse a retrieval file given as the dataset: its JSON would be evaluated as if it were the text."""
    if not text.lstrip().startswith("["):
        return
    try:
        windows = json.loads(text)
    except ValueError:  # text that begins with a bracket
        return
    if isinstance(windows, list) and windows and isinstance(windows[0], dict) \
            and all(key in windows[0] for key in RETRIEVAL_FILE_KEYS):
        raise InputError(f"The {setting('dataset_path')} {path!r} is a retrieval file (a JSON list of "
                         f"{len(windows)} windows with their retrieved_docs), not the text to evaluate: give it as "
                         f"{setting('retrieval_file')}, and {setting('dataset_path')} the text it was made from.")
