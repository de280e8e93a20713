"""Reading retrieval corpora and cutting articles into DPR-style passages.

Accepted inputs: JSONL or JSONL.gz rows with ``id``, ``title``, ``text``; a DPR-style TSV (``id``, ``text``,
``title`` columns, header row); a Hugging Face dataset with those columns named ``hf:DATASET[:CONFIG]`` (a Hub id,
a local dataset folder, or a folder written by ``Dataset.save_to_disk``; its ``train`` split, or the only one); or a
``datasets.Dataset`` with those columns.

Examples:
    >>> list(split_passages([{"id": "7", "title": "T", "text": "a b c d e"}], words_per_passage=2))
    [{'title': 'T', 'text': 'a b', 'source_id': '7'}, {'title': 'T', 'text': 'c d', 'source_id': '7'}, \
{'title': 'T', 'text': 'e', 'source_id': '7'}]
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sys
from typing import Callable, Iterable, Iterator, Sequence

from ..errors import CorpusError
from ..utils.checks import check_count, check_json_text, is_input_file, reading
from ..utils.datasets_io import load_hf_dataset

WORDS_PER_PASSAGE = 100
"""The words of a passage cut from an article ([`split_passages`][hf_ralm.retrieval.split_passages]): DPR's passage
size, the paper's corpus."""

TSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)
"""The longest field a TSV corpus may hold, in characters: any (the ``csv`` module's default, 131,072, is shorter
than some Wikipedia articles); the largest value ``csv.field_size_limit`` takes everywhere (a C ``long``)."""


HUB_PREFIX = "hf:"


def is_hub_corpus(path: str) -> bool:
    """Whether a ``--corpus`` names a Hugging Face dataset (``hf:DATASET[:CONFIG]``) rather than a file."""
    return isinstance(path, str) and path.startswith(HUB_PREFIX)


def load_hub_corpus(spec: str):
    """The ``datasets.Dataset`` an ``hf:DATASET[:CONFIG]`` corpus names (``hf_ralm.utils.datasets_io.load_hf_dataset``:
    its ``train`` split, or its only one); refused unless it has ``text`` and ``title`` columns."""
    name, _, config = spec[len(HUB_PREFIX):].partition(":")
    try:
        loaded = load_hf_dataset(name, config or None)
    except (FileNotFoundError, ValueError) as error:
        raise CorpusError(f"The corpus {spec!r}: {error}") from None
    missing = [column for column in ("title", "text") if column not in loaded.column_names]
    if missing:
        raise CorpusError(f"The corpus {spec!r} has columns {', '.join(loaded.column_names)}: it needs 'title' and "
                          "'text' (and 'id'; row numbers otherwise).")
    return loaded


def _hub_rows(spec: str) -> Iterator[dict]:
    dataset = load_hub_corpus(spec)
    has_id = "id" in dataset.column_names
    for number, row in enumerate(dataset):
        yield {"id": str(row["id"]) if has_id else str(number), "title": row["title"] or "", "text": row["text"]}


def is_corpus_file(path: str) -> bool:
    """Whether a ``--corpus`` names a file that is there (not an ``hf:`` dataset); a FIFO or a device is refused
    ([`CorpusError`][hf_ralm.errors.CorpusError], ``hf_ralm.utils.checks.is_input_file``) before anything opens it."""
    return not is_hub_corpus(path) and is_input_file(path, "corpus", CorpusError)


CORPUS_FORMATS = ("a JSONL/JSONL.gz file with id, title and text fields, a DPR-style TSV with id, text and title "
                  "columns, or hf:DATASET[:CONFIG] for a Hugging Face dataset")
"""What ``--corpus`` takes, as a message that refuses one says."""


def check_corpus_file(path: str) -> None:
    """Refuse a ``--corpus`` that names no corpus file, before anything slow loads: a missing path
    (``FileNotFoundError``), a folder ([`CorpusError`][hf_ralm.errors.CorpusError]), a FIFO or a device
    (``is_corpus_file``); an ``hf:`` dataset passes.

    Examples:
        >>> import tempfile
        >>> check_corpus_file(tempfile.mkdtemp())
        Traceback (most recent call last):
        ...
        hf_ralm.errors.CorpusError: The corpus '...' is a folder, not a corpus file: give --corpus a JSONL/JSONL.gz ...
    """
    if is_hub_corpus(path) or is_corpus_file(path):
        return
    if os.path.isdir(path):
        raise CorpusError(f"The corpus {path!r} is a folder, not a corpus file: give --corpus {CORPUS_FORMATS} (an "
                          "index folder goes to --index-dir).")
    raise FileNotFoundError(f"Corpus file not found: {path!r}. Give --corpus {CORPUS_FORMATS}.")


def check_corpus_paths(corpus) -> None:
    """Refuse (``check_corpus_file``) each corpus file that ``corpus`` names, a path or a list of paths (rows or a
    dataset name none), before anything slow loads.

    Examples:
        >>> check_corpus_paths([{"id": "1", "title": "Rome", "text": "..."}])   # rows: no file to check
    """
    paths = [corpus] if isinstance(corpus, (str, os.PathLike)) else corpus if isinstance(corpus, (list, tuple)) else []
    for path in paths:
        if isinstance(path, (str, os.PathLike)):
            check_corpus_file(os.fspath(path))


def read_corpus(path: str) -> Iterator[dict]:
    """The rows of a corpus, read row by row.

    Args:
        path: A JSONL(.gz) or TSV(.gz) file, or a Hugging Face dataset named ``hf:DATASET[:CONFIG]``
            (``load_hub_corpus``).

    Yields:
        ``{"id", "title", "text"}`` rows.

    Raises:
        CorpusError: a line that is no JSON object with a ``text`` string (and a ``title`` string, when it has one)
            (JSONL), a TSV without ``id`` and ``text`` columns, or bytes that are not UTF-8, the message naming the
            file and the line; a damaged gzip file, a FIFO or a device (``hf_ralm.utils.checks.reading``).
    """
    for row, _ in _rows_and_bytes(path):
        yield row


def _rows_and_bytes(path: str) -> Iterator[tuple[dict, int | None]]:
    """The rows of a corpus, each with how many bytes of its file (as stored: compressed for .gz) were read
    (``None`` for a Hugging Face dataset)."""
    if is_hub_corpus(path):
        for row in _hub_rows(path):
            yield row, None
        return
    check_corpus_file(path)
    name = path[:-3] if path.endswith(".gz") else path
    with reading(path, CorpusError, "corpus") as f:
        raw = getattr(f.buffer, "fileobj", f.buffer)  # gzip's compressed file, or the plain file's buffer
        rows = _tsv_rows(path, f) if name.endswith(".tsv") else (
            _jsonl_row(path, line_number, line) for line_number, line in enumerate(f, 1) if line.strip())
        for row in rows:
            yield row, raw.tell()


def corpus_bytes(paths: Iterable[str]) -> int:
    """The bytes of the corpus files among ``paths`` as stored (not ``hf:`` datasets; a missing file counts 0 and
    is reported when read)."""
    return sum(os.path.getsize(p) for p in paths if not is_hub_corpus(p) and os.path.isfile(p))


def read_corpora(paths: Sequence[str], show_progress: bool = False,
                 pace: Callable[[int, int], None] | None = None) -> Iterator[dict]:
    """The rows of several corpora in order ([`read_corpus`][hf_ralm.retrieval.read_corpus]), with one progress bar
    over the files' bytes, so that a one-time index build shows how far it is and how long is left (``hf:`` corpora
    count no bytes); ``pace`` is called with the bytes read and in all as the bar moves (a build's estimate at the
    measured speed: ``hf_ralm.retrieval.index_builds.build_pace``)."""
    from ..utils.progress import tqdm

    total = corpus_bytes(paths)
    with tqdm(total=total or None, unit="B", unit_scale=True, desc="Reading the corpus",
              disable=not show_progress) as bar:
        done = 0
        for path in paths:
            for number, (row, position) in enumerate(_rows_and_bytes(path)):
                if position is not None and number % 1000 == 0:
                    bar.update(done + position - bar.n)
                    if pace is not None:
                        pace(done + position, total)
                yield row
            done += corpus_bytes([path])
            bar.update(done - bar.n)


def _jsonl_row(path: str, line_number: int, line: str) -> dict:
    try:
        row = json.loads(line)
    except ValueError as error:
        raise CorpusError(f"{path}:{line_number}: not a JSON object ({error}); a JSONL corpus holds one "
                          '{"id", "title", "text"} object per line: fix or remove that line.') from None
    if not isinstance(row, dict) or "text" not in row:
        got = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise CorpusError(f"{path}:{line_number}: corpus rows need a 'text' field, got {got}; give every row its "
                          "article text (and 'id', 'title'), or remove that line.")
    if not isinstance(row["text"], str):
        raise CorpusError(f"{path}:{line_number}: the row's 'text' is {row['text']!r}, not a string: give it the "
                          "article text, or remove that line.")
    if row.get("title") is not None and not isinstance(row["title"], str):
        raise CorpusError(f"{path}:{line_number}: the row's 'title' is {row['title']!r}, not a string: give it the "
                          "article's title as a string (or null, or no 'title': no title).")
    check_json_text(row, line, f"{path}:{line_number}", CorpusError)
    return {"id": str(row.get("id", line_number - 1)), "title": row.get("title") or "", "text": row["text"]}


def _tsv_rows(path: str, f) -> Iterator[dict]:
    csv.field_size_limit(TSV_FIELD_LIMIT)  # a whole article in one field
    reader = csv.DictReader(f, delimiter="\t")
    missing = [column for column in ("id", "text") if column not in (reader.fieldnames or [])]
    if missing:
        raise CorpusError(f"{path}: the TSV corpus has no {' and no '.join(missing)} column (header: "
                          f"{reader.fieldnames}); its first line must name the columns id, text and title (DPR's).")
    for row in reader:
        if row["text"] is None:
            raise CorpusError(f"{path}:{reader.line_num}: the row has no text column (too few tab-separated "
                              "fields): fix or remove that line.")
        yield {"id": str(row["id"]), "title": row.get("title") or "", "text": row["text"]}


def check_words_per_passage(words_per_passage: int) -> None:
    """Raise a [`SettingError`][hf_ralm.errors.SettingError] naming ``words_per_passage`` unless it is a number of
    words, or 0 (the rows are the passages): checked before a corpus is read, which a negative size would cut into
    nothing.

    Examples:
        >>> check_words_per_passage(-5)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: words_per_passage must be at least 0, got -5.
    """
    check_count("words_per_passage", words_per_passage, minimum=0)


def split_passages(articles: Iterable[dict], words_per_passage: int = WORDS_PER_PASSAGE) -> Iterator[dict]:
    """Cut each article's text into consecutive, non-overlapping passages of ``words_per_passage`` words (the last
    one shorter), keeping the title and the article's id as ``source_id``, as DPR did for Wikipedia.

    Args:
        articles: ``{"id", "title", "text"}`` rows ([`read_corpus`][hf_ralm.retrieval.read_corpus]'s).
        words_per_passage: The words of a passage, at least 1.

    Yields:
        ``{"title", "text", "source_id"}`` passages, in order.

    Raises:
        SettingError: ``words_per_passage`` is not a count of at least 1 (raised as the first passage is asked for).

    Examples:
        >>> [p["text"] for p in split_passages([{"id": "7", "title": "Rome", "text": "a b c"}], words_per_passage=2)]
        ['a b', 'c']
    """
    check_count("words_per_passage", words_per_passage)  # 0 keeps the rows: passage_rows
    for article in articles:
        words = article["text"].split()
        for start in range(0, len(words), words_per_passage):
            yield {
                "title": article["title"],
                "text": " ".join(words[start : start + words_per_passage]),
                "source_id": str(article["id"]),
            }


def passage_rows(articles: Iterable[dict], words_per_passage: int = WORDS_PER_PASSAGE) -> Iterator[dict]:
    """The passages every backend indexes, in this order (their ids are these row numbers):
    [`split_passages`][hf_ralm.retrieval.split_passages], or with ``words_per_passage=0`` the rows as they are
    (already passages)."""
    check_words_per_passage(words_per_passage)  # now, not when the first row is read
    if words_per_passage:
        return split_passages(articles, words_per_passage)
    return (
        {"title": a.get("title") or "", "text": a["text"], "source_id": str(a.get("id", i))}
        for i, a in enumerate(articles)
    )


PASSAGE_COLUMNS = ("title", "text", "source_id")
"""The columns of an index's passages table (the row number is the passage id)."""


def passage_columns(articles: Iterable[dict], words_per_passage: int = WORDS_PER_PASSAGE) -> dict[str, list[str]]:
    """``passage_rows`` as columns (``PASSAGE_COLUMNS``), for ``datasets.Dataset.from_dict``."""
    columns: dict[str, list[str]] = {name: [] for name in PASSAGE_COLUMNS}
    for row in passage_rows(articles, words_per_passage):
        for key, values in columns.items():
            values.append(row[key])
    return columns


def check_passage_count(num_passages: int, paths: Sequence[str] | None) -> None:
    """Raise [`CorpusError`][hf_ralm.errors.CorpusError] when a corpus (its ``paths``, ``None`` for rows) gave no
    passage to index, before any index is written."""
    if num_passages == 0:
        where = f"the corpus {', '.join(paths)}" if paths else "the corpus rows"
        raise CorpusError(f"{where[0].upper()}{where[1:]} gave no passages: no row has a non-empty 'text'. Give "
                          "--corpus a file of articles with their text.")


def corpus_fingerprint(paths: Iterable[str], words_per_passage: int) -> str:
    """A hash of the corpus files' bytes (of a Hugging Face dataset, ``hf:...``: its ``datasets`` fingerprint, a hash
    of its data) and the passage size: an index is reused only for the same fingerprint."""
    check_words_per_passage(words_per_passage)
    digest = hashlib.sha256(f"words_per_passage={words_per_passage}".encode())
    for path in paths:
        if is_hub_corpus(path):
            digest.update(f"{path}:{load_hub_corpus(path)._fingerprint}".encode())
            continue
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()
