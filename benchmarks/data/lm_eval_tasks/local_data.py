"""The rows of the local lm-eval tasks in this folder, read from the project's shared data (``../shared/data`` beside
the repository; another folder with ``--metadata '{"shared_data": "DIR"}'``), offline: WikiText-103 test documents
(``ralm_wikitext103_local``), NQ-open questions with their answers (``ralm_nq_open_local``) and as a four-way
multiple choice (``ralm_nq_open_choice``).

lm-eval hands a task's ``custom_dataset`` function its metadata (``--metadata``, and ``--model_args`` too) as keyword
arguments: each function takes ``shared_data`` and ignores the rest. The paths are resolved here, not in the YAML
(a YAML's ``data_files`` would be read from whatever directory lm-eval runs in).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import datasets

from benchmarks.bench_setup import SHARED
from hf_ralm import join_rows

DOCUMENT_WORDS = 320
"""Words kept of each WikiText-103 document: enough for windows with retrieval at max_length 256 (a document fits in
one window otherwise, and window 0 never retrieves), few enough for a CPU."""

HEADING = re.compile(r"^ = [^=].* = \n$")  # an article's title row; section titles have two or more '='


def _folder(shared_data: str | None) -> Path:
    folder = Path(shared_data or SHARED).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"The shared data folder {folder} does not exist: pass its place with --metadata "
                                "'{\"shared_data\": \"DIR\"}'.")
    return folder


def _split(rows: list[dict]) -> datasets.DatasetDict:
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def first_words(text: str, words: int) -> str:
    """``text`` up to the end of its ``words``-th word (its spacing and line breaks kept).

    Example:
        >>> first_words(" = Rome = \\n Rome was a city .\\n", 4)
        ' = Rome = \\n Rome'
    """
    found = list(re.finditer(r"\S+", text))
    return text if len(found) <= words else text[: found[words - 1].end()]


def wikitext_documents(shared_data: str | None = None, words: int = DOCUMENT_WORDS, **metadata) -> datasets.DatasetDict:
    """WikiText-103 test, one row per article (``title``, ``page``: its rows joined as the reference joins them,
    an empty row becoming ``" \\n"``, cut after ``words`` words), in file order: the articles of lm-eval's
    ``wikitext`` task (WikiText-2 and -103 share their test articles), tokenized as the paper evaluates them."""
    with open(_folder(shared_data) / "wikitext-103" / "test.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line)["text"] for line in f if line.strip()]
    articles: list[list[str]] = []
    for row in rows:
        if HEADING.match(row):
            articles.append([])
        if articles:
            articles[-1].append(row)
    return _split([{"title": article[0].strip(" =\n"), "page": first_words(join_rows(article), words)}
                   for article in articles])


def _questions(shared_data: str | None) -> list[dict]:
    with gzip.open(_folder(shared_data) / "nq-open" / "nq-open-gold-2000.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def nq_open(shared_data: str | None = None, **metadata) -> datasets.DatasetDict:
    """NQ-open's 2,000 questions of the shared data (``question``, ``answers``), without their gold passages."""
    return _split([{"question": row["question"], "answers": row["answers"]} for row in _questions(shared_data)])


def nq_open_choices(shared_data: str | None = None, **metadata) -> datasets.DatasetDict:
    """The NQ-open questions as a four-way multiple choice: ``choices`` are the question's first gold answer and
    the first answers of the next three questions (in file order, wrapping around), placed so that the gold answer's
    index (``label``) cycles through 0 to 3."""
    questions = _questions(shared_data)
    rows = []
    for i, row in enumerate(questions):
        others = [questions[(i + k) % len(questions)]["answers"][0] for k in (1, 2, 3)]
        label = i % 4
        rows.append({"question": row["question"], "choices": others[:label] + [row["answers"][0]] + others[label:],
                     "label": label})
    return _split(rows)
