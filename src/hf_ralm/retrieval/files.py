"""Retrieval files in the paper's JSON format, so retrieval is done once and reused (and files made by the paper's
``prepare_retrieval_data.py`` can be evaluated).

The file is a list with one item per evaluation window:

```
{"begin_location": prev_end, "end_location": end, "future": decoded scored tokens, "query": text,
 "retrieved_docs": [{"id", "title", "text", "score"}, ...]}
```

Window 0 is listed too (with no query and no passages) because the reference counts it. A reranked file
(``hf-ralm retrieve --rerank ...``) lists the ``k`` candidates in retrieval order, as the reference's ranking runs do,
each with its ``ranking_nll`` when an LM ranked them, and adds ``"chosen"`` (the index of the passage put in context, -1
for none), ``"rerank"`` (the strategy) and, when the window without a passage was a candidate,
``"no_passage_ranking_nll"``. A file written with a retrieval gate (``--retrieval-gate score|lm``) records the choices
too (``"rerank": "none"``, ``"chosen"`` -1 where the gate closed), with ``"retrieval_gate"``, ``"gate_threshold"`` (when
set) and each window's ``"gate_score"``. Files without ``chosen`` (the paper's scripts write none) put their first
passage(s) in context.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from ..errors import RetrievalFileError, setting
from ..core.passages import NO_PASSAGE, Passage
from ..utils.atomic import write_json_atomic
from ..utils.checks import is_input_file, reading
from ..core.windows import Window, plan_settings


@dataclass
class Retrievals:
    """What a retrieval file holds for an evaluation.

    Attributes:
        passages: per window, its passages (candidates, in retrieval order).
        chosen: when the file was reranked or gated, per window the chosen passage's index (``NO_PASSAGE`` = -1 for
            none).
        rerank: the strategy that chose them.
        gate: the gate's settings (``{"retrieval_gate": ..., "gate_threshold": ...}``).
        gate_scores: per window, its gate score.
    """

    passages: list[list[Passage]]
    chosen: list[int] | None = None
    rerank: str | None = None
    gate: dict | None = None
    gate_scores: list[float | None] | None = None


def retrieval_records(
    windows: Sequence[Window],
    queries: Sequence[str | None],
    futures: Sequence[str],
    passages: Sequence[list[Passage]],
    chosen: Sequence[int] | None = None,
    *,
    ranking_nlls: Sequence[Sequence[float] | None] | None = None,
    rerank: str | None = None,
    gate: dict | None = None,
    gate_scores: Sequence[float | None] | None = None,
) -> list[dict]:
    """One reference-format record per window, with the reranker's choice and ranking NLLs when given, and a retrieval
    gate's settings and per-window scores.

    Args:
        windows: the evaluation's windows.
        queries: per window, its query (``None`` for window 0).
        futures: per window, its decoded tokens after the previous window's end.
        passages: per window, its passages (candidates, in retrieval order).
        chosen: per window, the index of the passage put in context (``NO_PASSAGE``: none).
        ranking_nlls: per window, its candidates' ranking NLLs (and the no-passage option's, last, when it was one).
        rerank: the strategy that chose.
        gate: the retrieval gate's settings, written into every record.
        gate_scores: per window, its gate score.

    Returns:
        The records.
    """
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
        if gate is not None:
            record.update(gate)
            if gate_scores is not None and gate_scores[w.index] is not None:
                record["gate_score"] = gate_scores[w.index]
        records.append(record)
    return records


def save_retrieval_file(path: str, records: list[dict]) -> None:
    write_json_atomic(path, records)


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}
_FORMAT = ("each item needs begin_location and end_location (token offsets) and retrieved_docs (passages with a "
           "text), as hf-ralm retrieve --save-retrieval-file writes them")


def _item_problem(item) -> str | None:
    """What is wrong with one item of a retrieval file, or ``None``."""
    if not isinstance(item, dict):
        return f"is {_JSON_TYPES.get(type(item), type(item).__name__)}, not an object"
    for key in ("begin_location", "end_location"):
        if key not in item:
            return f"has no {key!r}"
        if isinstance(item[key], bool) or not isinstance(item[key], int):
            return f"has {key} {item[key]!r}, not a token offset"
    docs = item.get("retrieved_docs", [])
    if not isinstance(docs, list):
        return f"has retrieved_docs {_JSON_TYPES.get(type(docs), type(docs).__name__)}, not a list"
    for j, doc in enumerate(docs):
        if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
            return f"has a passage (retrieved_docs[{j}]) without a 'text' string"
        try:
            float(doc.get("score", 0.0))
        except (TypeError, ValueError):
            return f"has a passage (retrieved_docs[{j}]) whose score {doc['score']!r} is no number"
    return None


def read_retrieval_items(path: str) -> list[dict]:
    """The items of a retrieval file, checked to be a JSON list of windows with their locations and passages.

    Args:
        path: the retrieval file.

    Returns:
        Its items.

    Raises:
        FileNotFoundError: no such file.
        RetrievalFileError: not UTF-8, not JSON, not a list, or an item without its fields; the message names the file
            (and the item) and says what a retrieval file holds. A FIFO or a device, refused before it is opened
            (``reading``, in ``hf_ralm.utils.checks``).
    """
    if not is_input_file(path, "retrieval file", RetrievalFileError):
        raise FileNotFoundError(f"Retrieval file not found: {path!r}. Write one with hf-ralm retrieve "
                                f"--save-retrieval-file {path} (or eval-lm --save-retrieval-file); a retrieval "
                                "dataset is named by its folder, or hf:REPO_ID on the Hub.")
    with reading(path, RetrievalFileError, "retrieval file") as f:
        try:
            items = json.load(f)
        except json.JSONDecodeError as error:
            raise RetrievalFileError(f"{path} is not JSON ({error.msg}: line {error.lineno} column {error.colno}); a "
                                     f"retrieval file is a JSON list with one item per window: {_FORMAT}.") from None
    if not isinstance(items, list):
        raise RetrievalFileError(f"{path} holds {_JSON_TYPES.get(type(items), 'JSON')}, not a list with one item per "
                                 f"window; {_FORMAT}.")
    for i, item in enumerate(items):
        problem = _item_problem(item)
        if problem is not None:
            raise RetrievalFileError(f"{path}: item {i} {problem}; {_FORMAT}.")
    return items


def _describe_plan(plan: tuple[int | None, int | None, int] | None) -> str:
    """What ``plan_settings`` (in ``hf_ralm.core.windows``) found out about some windows, for a message."""
    if plan is None:
        return f"no sliding windows of any {setting('retrieval_stride')} and {setting('max_length')}"
    stride, max_length, num_tokens = plan
    known = [f"{setting(name)}={value}" for name, value in (("retrieval_stride", stride), ("max_length", max_length))
             if value is not None]
    return f"{', '.join(known) or 'one window'} over {num_tokens} tokens"


def check_window_locations(path: str, items: Sequence[dict], windows: Sequence[Window]) -> None:
    """Check that the items of the retrieval file ``path`` are the evaluation's ``windows`` (same
    ``begin_location``/``end_location``).

    Args:
        path: the retrieval file, for the message.
        items: its items.
        windows: the evaluation's windows.

    Raises:
        RetrievalFileError: they are not; the message says which settings the file was made with (inferred from its
            locations: ``plan_settings``, in ``hf_ralm.core.windows``) and how to match them.
    """
    found = [(item["begin_location"], item["end_location"]) for item in items]
    wanted = [(w.prev_end, w.end) for w in windows]
    if found == wanted:
        return
    if len(found) != len(wanted):
        what = f"{path} has {len(found)} windows but this evaluation has {len(wanted)}"
    else:
        i = next(i for i, (a, b) in enumerate(zip(found, wanted)) if a != b)
        what = f"{path}: window {i} covers [{found[i][0]}, {found[i][1]}) in the file but [{wanted[i][0]}, " \
               f"{wanted[i][1]}) here"
    theirs, ours = plan_settings([end for _, end in found]), plan_settings([end for _, end in wanted])
    fix = "evaluate with the settings, dataset and tokenizer it was made with"
    if theirs is not None and ours is not None:
        pairs = zip(("retrieval_stride", "max_length"), theirs, ours)
        differ = [f"{setting(name)}={value}" for name, value, own in pairs if value is not None and value != own]
        if theirs[2] != ours[2]:
            differ.append(f"the dataset, tokenizer and {setting('max_eval_tokens')} that give {theirs[2]} tokens")
        fix = f"evaluate with {', '.join(differ)}" if differ else fix
    raise RetrievalFileError(f"{what}: the file's windows are {_describe_plan(theirs)}, this evaluation's "
                             f"{_describe_plan(ours)}. To use the file, {fix}; or write one for these settings with "
                             "hf-ralm retrieve --save-retrieval-file.")


def _words(text: str) -> str:
    return " ".join(text.split())


def check_window_texts(path: str, items: Sequence[dict], futures: Sequence[str]) -> None:
    """Check that the retrieval file ``path`` was made for this text: each item's ``future`` (its window's tokens after
    the previous window, decoded) is that window's here (compared word by word, so that a tokenizer's spacing of the
    decoded text does not matter). The queries are not compared: they depend on the query length the file was made with,
    which a run that reads passages from a file does not use; the futures depend on the text alone. Items without a
    ``future`` (or with an empty one, as hand-made files have) are not checked.

    Args:
        path: the retrieval file, for the message.
        items: its items.
        futures: per window, its decoded tokens here.

    Raises:
        RetrievalFileError: an item's ``future`` differs from its window's here.
    """
    for i, (item, future) in enumerate(zip(items, futures)):
        stored = item.get("future")
        if isinstance(stored, str) and stored.strip() and _words(stored) != _words(future):
            raise RetrievalFileError(f"{path} was made for another text: window {i} scores {_words(stored)[:60]!r} "
                                     f"there and {_words(future)[:60]!r} here. Use the retrieval file of this "
                                     "dataset (the same --dataset-path, tokenizer and --max-eval-tokens), or write "
                                     "one with hf-ralm retrieve --save-retrieval-file.")


def load_retrieval_file(path: str, windows: Sequence[Window], futures: Sequence[str] | None = None) -> Retrievals:
    """Passages (and a reranked file's choices) per window from a retrieval file, checked against the windows being
    evaluated and, with ``futures``, against the text (``check_window_texts``).

    Args:
        path: the retrieval file.
        windows: the evaluation's windows.
        futures: per window, its decoded tokens (``window_futures``, in ``hf_ralm.core.plan``); ``None``: the text is
            not checked.

    Returns:
        The file's ``Retrievals``.
    """
    return retrievals_from_items(path, read_retrieval_items(path), windows, futures)


def retrievals_from_items(path: str, records: Sequence[dict], windows: Sequence[Window],
                          futures: Sequence[str] | None = None) -> Retrievals:
    """What ``load_retrieval_file`` gives for the items of a retrieval file (or of a retrieval dataset's rows in the
    same layout: ``hf_ralm.retrieval.dataset``), named ``path`` in messages."""
    check_window_locations(path, records, windows)
    if futures is not None:
        check_window_texts(path, records, futures)
    passages = []
    for w, record in zip(windows, records):
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
    gated = [record for record in records if record.get("retrieval_gate")]
    gate = {key: gated[0][key] for key in ("retrieval_gate", "gate_threshold") if key in gated[0]} if gated else None
    gate_scores = [record.get("gate_score") for record in records] if gated else None
    return Retrievals(passages, chosen, ",".join(sorted(strategies)) or None, gate, gate_scores)
