"""Training data of the predictive reranker (Ram et al. 2023, §6.2): its format and its chunked, resumable I/O.

One row per evaluation window: the prefix the reranker reads, the ``k`` candidate passages retrieval gave for the
window, and the frozen reader's log-probability of the window's next stride given each candidate in context.

A data folder::

    DATA_DIR/
      rerank_data.json     how the data was made: reader, k, stride, query_length, rerank_tokens, ...
      chunk-00000/         a complete datasets.Dataset (save_to_disk)
      chunk-00001/
      .tmp-chunk-00002/    a chunk being written, or left by a crash: the loader ignores it, the writer replaces it

A chunk is written under its temporary name and renamed once complete, so a crash loses at most the rows not yet
in a complete chunk, and a resumed run appends after the complete ones.

Example::

    from hf_ralm.reranking import RerankDataWriter, load_rerank_data

    metadata = {"reader": "gpt2", "k": 16, "stride": 4, "query_length": 32, "rerank_tokens": 16}
    with RerankDataWriter("data/rerank", metadata, chunk_size=1000) as writer:
        for row in my_rows()[writer.num_done:]:  # a deterministic generator: skip what is already saved
            writer.add([row])
    dataset, metadata = load_rerank_data("data/rerank")
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import datasets
import numpy as np

METADATA_FILE = "rerank_data.json"
CHUNK_PREFIX = "chunk-"
TMP_PREFIX = ".tmp-chunk-"
_CHUNK_RE = re.compile(r"^chunk-(\d{5,})$")

FEATURES = datasets.Features(
    {
        "prefix": datasets.Value("string"),
        "candidates": datasets.List(datasets.Value("string")),
        "retrieval_scores": datasets.List(datasets.Value("float64")),
        "target_logprobs": datasets.List(datasets.Value("float64")),
        "article": datasets.Value("string"),
        "window": datasets.Value("int64"),
    }
)
COLUMNS = tuple(FEATURES)
LIST_COLUMNS = ("candidates", "retrieval_scores", "target_logprobs")

# The settings the model card reports (reader, k, s, ℓ, s'); without them a trained reranker could not say what it
# was trained for. Other keys (max_length, max_doc_tokens, corpus, ...) are kept as given.
REQUIRED_METADATA = ("reader", "k", "stride", "query_length", "rerank_tokens")

# Summed log-probabilities are <= 0; a little slack absorbs float rounding, while NLLs passed by mistake (> 0) fail.
_LOGPROB_SLACK = 1e-4


class RerankDataWriter:
    """Appends rows to a rerank data folder in complete chunks of ``chunk_size`` rows.

    Opening a folder that already holds data of the same metadata resumes it; other metadata is refused unless
    ``overwrite=True``, which deletes the folder's data files first. ``num_done`` counts the rows saved in complete
    chunks (what survives a crash: a resumed run skips that many rows of its deterministic row stream) and
    ``num_chunks`` the chunks.

    Example::

        writer = RerankDataWriter("data/rerank", {"reader": "gpt2", "k": 2, "stride": 4, "query_length": 32,
                                                  "rerank_tokens": 16}, chunk_size=500)
        writer.add([{"prefix": "the emperor of", "candidates": ["Rome\\nrome was ...", "Music\\nthe band ..."],
                     "retrieval_scores": [7.5, 3.1], "target_logprobs": [-6.2, -9.8],
                     "article": "Rome", "window": 3}])
        writer.close()
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        metadata: Mapping[str, Any],
        *,
        chunk_size: int = 1000,
        overwrite: bool = False,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}.")
        self.folder = Path(folder)
        self.metadata = _normalise_metadata(metadata)
        self.chunk_size = chunk_size
        self._buffer: list[dict[str, Any]] = []
        self._closed = False

        metadata_path = self.folder / METADATA_FILE
        if overwrite:
            _remove_data_files(self.folder)
        elif metadata_path.is_file():
            _check_same_metadata(metadata_path, self.metadata)
        elif self.folder.is_dir() and any(self.folder.iterdir()):
            raise FileExistsError(
                f"{self.folder} is not empty and has no {METADATA_FILE}, so it is not a rerank data folder: "
                "write to a new or empty folder, or pass overwrite=True to write there anyway."
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        for leftover in self.folder.glob(TMP_PREFIX + "*"):  # chunks a crash left half written
            shutil.rmtree(leftover)
        _write_json_atomic(metadata_path, self.metadata)

        chunks = complete_chunks(self.folder)
        self.num_chunks = len(chunks)
        with _quiet_datasets():
            self.num_done = sum(datasets.load_from_disk(str(chunk)).num_rows for chunk in chunks)
        self._next_index = _chunk_index(chunks[-1]) + 1 if chunks else 0

    def add(self, rows: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> None:
        """Buffers ``rows`` (one row or several), saving a chunk whenever ``chunk_size`` rows are buffered."""
        if self._closed:
            raise RuntimeError(f"This writer of {self.folder} is closed: open a new RerankDataWriter to add rows.")
        for row in [rows] if isinstance(rows, Mapping) else rows:
            self._buffer.append(validate_row(row))
            if len(self._buffer) >= self.chunk_size:
                self._flush()

    def close(self) -> None:
        """Saves the buffered rows as a last (possibly shorter) chunk; closing twice is harmless."""
        if not self._closed:
            self._flush()
            self._closed = True

    def __enter__(self) -> RerankDataWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Buffered rows are complete and valid even when the caller failed, so they are saved all the same.
        self.close()

    def _flush(self) -> None:
        if not self._buffer:
            return
        name = f"{self._next_index:05d}"
        tmp, final = self.folder / (TMP_PREFIX + name), self.folder / (CHUNK_PREFIX + name)
        with _quiet_datasets():
            datasets.Dataset.from_list(self._buffer, features=FEATURES).save_to_disk(str(tmp))
        os.replace(tmp, final)  # the rename makes the chunk visible only once complete
        self.num_done += len(self._buffer)
        self.num_chunks += 1
        self._next_index += 1
        self._buffer = []


def load_rerank_data(folder: str | os.PathLike) -> tuple[datasets.Dataset, dict[str, Any]]:
    """The complete chunks of a rerank data folder as one dataset (in writing order), and its metadata.

    Example::

        dataset, metadata = load_rerank_data("data/rerank")
        print(dataset.num_rows, metadata["reader"], dataset[0]["target_logprobs"])
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"No rerank data folder at {folder}: write one with RerankDataWriter first.")
    metadata_path = folder / METADATA_FILE
    if not metadata_path.is_file():
        raise FileNotFoundError(
            f"{folder} has no {METADATA_FILE}, so it is not a rerank data folder: point to the folder "
            "RerankDataWriter wrote."
        )
    metadata = json.loads(metadata_path.read_text(encoding="utf-8"))
    chunks = complete_chunks(folder)
    if not chunks:
        raise FileNotFoundError(
            f"{folder} holds no complete chunk ({CHUNK_PREFIX}00000/, ...): the writer saves rows every chunk_size "
            "rows and at close(), so close the writer (or use it in a with-block) after the last add()."
        )
    with _quiet_datasets():
        parts = [_load_chunk(chunk) for chunk in chunks]
    dataset = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    _check_list_lengths(dataset, folder)
    return dataset, metadata


def complete_chunks(folder: Path) -> list[Path]:
    """The complete chunk folders of ``folder``, in writing order (temporary leftovers are not among them)."""
    chunks = [path for path in folder.iterdir() if path.is_dir() and _CHUNK_RE.match(path.name)]
    return sorted(chunks, key=_chunk_index)


def validate_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` as a plain dict of the data format's columns, or a ValueError saying what is wrong with it."""
    if not isinstance(row, Mapping):
        raise TypeError(f"A row must be a dict with the columns {list(COLUMNS)}, got {type(row).__name__}.")
    missing, extra = set(COLUMNS) - set(row), set(row) - set(COLUMNS)
    if missing or extra:
        raise ValueError(
            f"A row must have exactly the columns {list(COLUMNS)}; missing {sorted(missing)}, unknown {sorted(extra)}."
        )
    where = f"row (article {row['article']!r}, window {row['window']!r})"
    if not isinstance(row["prefix"], str) or not isinstance(row["article"], str):
        raise ValueError(f"{where}: 'prefix' and 'article' must be strings.")
    if isinstance(row["window"], bool) or not isinstance(row["window"], int):
        raise ValueError(f"{where}: 'window' must be an int, got {row['window']!r}.")
    candidates = [] if isinstance(row["candidates"], str) else list(row["candidates"])
    if not candidates or not all(isinstance(text, str) for text in candidates):
        raise ValueError(f"{where}: 'candidates' must be a non-empty list of passage texts (\"title\\ntext\").")
    numbers = {}
    for column in ("retrieval_scores", "target_logprobs"):
        values = [float(value) for value in row[column]]
        if len(values) != len(candidates):
            raise ValueError(
                f"{where}: {len(values)} {column} for {len(candidates)} candidates; give one per candidate."
            )
        if not all(math.isfinite(value) for value in values):
            raise ValueError(f"{where}: {column} must be finite, got {values}.")
        numbers[column] = values
    if max(numbers["target_logprobs"]) > _LOGPROB_SLACK:
        raise ValueError(
            f"{where}: target_logprobs must be log-probabilities (<= 0), got {numbers['target_logprobs']}; "
            "if these are NLLs, negate them."
        )
    return {"prefix": row["prefix"], "candidates": candidates, **numbers, "article": row["article"],
            "window": row["window"]}


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Silences datasets' progress bars: a bar per small chunk would break up the caller's own progress bar."""
    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _normalise_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` as it reads back from JSON (tuples become lists), so a stored copy compares equal to it."""
    missing = [key for key in REQUIRED_METADATA if key not in metadata]
    if missing:
        raise ValueError(
            f"The metadata lacks {missing}: the trained reranker's card reports them, so pass "
            f"{list(REQUIRED_METADATA)} (plus any other settings, e.g. max_length, max_doc_tokens, corpus)."
        )
    try:
        return json.loads(json.dumps(dict(metadata)))
    except TypeError as error:
        raise TypeError(f"The metadata must be JSON-serializable (strings, numbers, lists, dicts): {error}") from None


def _check_same_metadata(path: Path, metadata: dict[str, Any]) -> None:
    stored = json.loads(path.read_text(encoding="utf-8"))
    differing = sorted(key for key in stored.keys() | metadata.keys() if stored.get(key) != metadata.get(key))
    if differing:
        details = "; ".join(f"{key!r}: stored {stored.get(key)!r}, given {metadata.get(key)!r}" for key in differing)
        raise ValueError(
            f"{path.parent} holds rerank data made with other settings ({details}). Appending would mix them: "
            "write to another folder, or pass overwrite=True to delete its data and start afresh."
        )


def _remove_data_files(folder: Path) -> None:
    """Deletes what a writer put in ``folder`` (and nothing else the user may keep there)."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.is_dir() and (_CHUNK_RE.match(path.name) or path.name.startswith(TMP_PREFIX)):
            shutil.rmtree(path)
    (folder / METADATA_FILE).unlink(missing_ok=True)


def _write_json_atomic(path: Path, content: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _chunk_index(path: Path) -> int:
    return int(path.name[len(CHUNK_PREFIX):])


def _load_chunk(path: Path) -> datasets.Dataset:
    chunk = datasets.load_from_disk(str(path))
    missing = [column for column in COLUMNS if column not in chunk.column_names]
    if missing:
        raise ValueError(
            f"{path} lacks the column(s) {missing} of the rerank data format {list(COLUMNS)}: "
            "write the data with RerankDataWriter (or add those columns)."
        )
    chunk = chunk.select_columns(list(COLUMNS))  # unknown extra columns are dropped, so chunks concatenate
    if chunk.features != FEATURES:
        try:
            chunk = chunk.cast(FEATURES)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path} has columns of the wrong types ({chunk.features}): {error}") from None
    return chunk


def list_lengths(dataset: datasets.Dataset, column: str) -> np.ndarray:
    """The length of each row's list in ``column`` of a dataset as :func:`load_rerank_data` returns it, read from
    Arrow without decoding the lists (the candidates' texts are most of the data).

    Example::

        list_lengths(dataset, "candidates").sum()  # how many candidate passages in all
    """
    import pyarrow.compute as pc

    return np.asarray(pc.list_value_length(dataset.data.column(column)))


def _check_list_lengths(dataset: datasets.Dataset, folder: Path) -> None:
    """Every row has as many retrieval scores and target log-probabilities as candidates, and at least one."""
    lengths = {column: list_lengths(dataset, column) for column in LIST_COLUMNS}
    bad = (lengths["candidates"] == 0) | np.any(
        [lengths[column] != lengths["candidates"] for column in LIST_COLUMNS[1:]], axis=0
    )
    if bad.any():
        row = int(np.argmax(bad))
        counts = {column: int(lengths[column][row]) for column in LIST_COLUMNS}
        raise ValueError(
            f"Row {row} of {folder} (and {int(bad.sum()) - 1} more) has unusable lists {counts}: each row needs at "
            "least one candidate and one retrieval score and one target log-probability per candidate."
        )
