"""Retrieval files in the paper's JSON format, so retrieval is done once and reused (and files made by the paper's
``prepare_retrieval_data.py`` can be evaluated).

The file is a list with one item per evaluation window::

    {"begin_location": prev_end, "end_location": end, "future": decoded scored tokens, "query": text,
     "retrieved_docs": [{"id", "title", "text", "score"}, ...]}

Window 0 is listed too (with no query and no passages) because the reference counts it. A reranked file (``hf-ralm
retrieve --rerank ...``) lists the ``k`` candidates in retrieval order, as the reference's ranking runs do, each with
its ``ranking_nll`` when an LM ranked them, and adds ``"chosen"`` (the index of the passage put in context, -1 for
none), ``"rerank"`` (the strategy) and, when the window without a passage was a candidate, ``"no_passage_ranking_nll"``.
Files without ``chosen`` (the paper's scripts write none) put their first passage in context.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Sequence

from ..windows import Window
from .base import Passage
from .jsonfile import write_json_atomic

NO_PASSAGE = -1  # ``chosen`` of a window evaluated without a passage


@dataclass
class Retrievals:
    """What a retrieval file holds for an evaluation: per window its passages (candidates, in retrieval order) and,
    when it was reranked, the chosen one's index (``NO_PASSAGE`` = -1 for none) and the strategy that chose it."""

    passages: list[list[Passage]]
    chosen: list[int] | None = None
    rerank: str | None = None


def retrieval_records(
    windows: Sequence[Window],
    queries: Sequence[str | None],
    futures: Sequence[str],
    passages: Sequence[list[Passage]],
    chosen: Sequence[int] | None = None,
    ranking_nlls: Sequence[Sequence[float] | None] | None = None,
    rerank: str | None = None,
) -> list[dict]:
    """One reference-format record per window, with the reranker's choice and ranking NLLs when given."""
    records = []
    for w, query, future, docs in zip(windows, queries, futures, passages):
        nlls = ranking_nlls[w.index] if ranking_nlls is not None and ranking_nlls[w.index] is not None else None
        record = {
            "begin_location": w.prev_end,
            "end_location": w.end,
            "future": future,
            "query": query,
            "retrieved_docs": [
                {**p.to_dict(), **({"ranking_nll": nlls[i]} if nlls is not None else {})} for i, p in enumerate(docs)
            ],
        }
        if chosen is not None:
            record.update(chosen=chosen[w.index], rerank=rerank)
            if nlls is not None and len(nlls) > len(docs):  # the window without a passage was a candidate
                record["no_passage_ranking_nll"] = nlls[len(docs)]
        records.append(record)
    return records


def save_retrieval_file(path: str, records: list[dict]) -> None:
    write_json_atomic(path, records)


def load_retrieval_file(path: str, windows: Sequence[Window]) -> Retrievals:
    """Passages (and a reranked file's choices) per window from a retrieval file, checked against the windows being
    evaluated."""
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
    if not any("chosen" in record for record in records):
        return Retrievals(passages)
    chosen = [int(record.get("chosen", NO_PASSAGE)) for record in records]
    for w, choice, found in zip(windows, chosen, passages):
        if not NO_PASSAGE <= choice < len(found):
            raise ValueError(f"{path}: window {w.index} chose passage {choice} of {len(found)}; the file is damaged.")
    strategies = {record.get("rerank") for record in records if record.get("rerank")}
    return Retrievals(passages, chosen, ",".join(sorted(strategies)) or None)
