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

import gzip
import json
import os

from .windows import join_rows


def load_dataset_text(path: str, name: str | None = None, split: str = "test") -> str:
    """The evaluation text at ``path``: a ``.jsonl``/``.jsonl.gz`` file of rows with a ``text`` field, joined as the
    reference joins dataset rows (:func:`hf_ralm.windows.join_rows`: an empty row becomes ``" \\n"``), any other file
    as plain text, or else a HF dataset (Hub id or folder, config ``name``, ``split``) whose ``text`` column is
    joined the same way.

    Raises:
        FileNotFoundError: ``path`` is neither a file nor a dataset ``datasets.load_dataset`` can load.
    """
    if os.path.isfile(path):
        if path.endswith((".jsonl", ".jsonl.gz")):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as f:
                return join_rows(json.loads(line)["text"] for line in f if line.strip())
        with open(path, encoding="utf-8") as f:
            return f.read()
    from datasets import load_dataset

    try:
        rows = load_dataset(path, name, split=split)
    except Exception as error:  # datasets raises several types for a missing dataset
        raise FileNotFoundError(f"Dataset {path!r} is neither a file nor a loadable HF dataset: {error}") from error
    return join_rows(rows["text"])
