"""Retrieval files in the paper's JSON format, so retrieval is done once and reused (and files made by the paper's
``prepare_retrieval_data.py`` can be evaluated).

The file is a list with one item per evaluation window::

    {"begin_location": prev_end, "end_location": end, "future": decoded scored tokens, "query": text,
     "retrieved_docs": [{"id", "title", "text", "score"}, ...]}

Window 0 is listed too (with no query and no passages) because the reference counts it.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

from ..windows import Window
from .base import Passage
from .jsonfile import write_json_atomic


def retrieval_records(
    windows: Sequence[Window], queries: Sequence[str | None], futures: Sequence[str], passages: Sequence[list[Passage]]
) -> list[dict]:
    """One reference-format record per window."""
    return [
        {
            "begin_location": w.prev_end,
            "end_location": w.end,
            "future": future,
            "query": query,
            "retrieved_docs": [p.to_dict() for p in docs],
        }
        for w, query, future, docs in zip(windows, queries, futures, passages)
    ]


def save_retrieval_file(path: str, records: list[dict]) -> None:
    write_json_atomic(path, records)


def load_retrieval_file(path: str, windows: Sequence[Window]) -> list[list[Passage]]:
    """Passages per window from a retrieval file, checked against the windows being evaluated."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Retrieval file not found: {path!r}.")
    with open(path, encoding="utf-8") as f:
        records = json.load(f)
    if len(records) != len(windows):
        raise ValueError(
            f"{path} has {len(records)} windows but this evaluation has {len(windows)}: it was made with other "
            "--stride/--max-length/--max-eval-tokens settings or another tokenizer."
        )
    passages = []
    for w, record in zip(windows, records):
        if (record["begin_location"], record["end_location"]) != (w.prev_end, w.end):
            raise ValueError(
                f"{path}: window {w.index} covers [{record['begin_location']}, {record['end_location']}) in the file "
                f"but [{w.prev_end}, {w.end}) here; the file was made with other settings."
            )
        passages.append(
            [
                Passage(str(d.get("id", "")), d.get("title") or "", d["text"], float(d.get("score", 0.0)))
                for d in record.get("retrieved_docs", [])
            ]
        )
    return passages
