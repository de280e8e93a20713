"""Training data of the predictive reranker (Ram et al. 2023, §6.2): its format and its chunked, resumable I/O.

One row per evaluation window: the prefix the reranker reads, the ``k`` candidate passages retrieval gave for the
window, and the frozen reader's log-probability of the window's next stride given each candidate in context.

A data folder::

    DATA_DIR/
      rerank_data.json     how the data was made: reader, k, stride, query_length, rerank_tokens, ...
      chunk-00000/         a complete datasets.Dataset (save_to_disk)
      chunk-00001/
      .tmp-chunk-00002/    a chunk being written, or left by a crash: the loader ignores it, the writer replaces it

A chunk is written under its temporary name, flushed to disk and renamed once complete (:mod:`hf_ralm.chunks`), so a
crash loses at most the rows not yet in a complete chunk, and a resumed run appends after the complete ones.

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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from ..chunks import CHUNK_PREFIX, ChunkWriter

METADATA_FILE = "rerank_data.json"

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


class RerankDataWriter(ChunkWriter):
    """Appends rows to a rerank data folder in complete chunks of ``chunk_size`` rows (a
    :class:`~hf_ralm.chunks.ChunkWriter` of ``datasets`` chunks).

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

    metadata_file = METADATA_FILE
    what = "rerank data"

    def save_chunk(self, rows: list[dict[str, Any]], path: Path) -> None:
        with _quiet_datasets():
            datasets.Dataset.from_list(rows, features=FEATURES).save_to_disk(str(path))

    def read_chunk(self, path: Path) -> datasets.Dataset:
        with _quiet_datasets():
            return datasets.load_from_disk(str(path))

    def normalise_metadata(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        missing = [key for key in REQUIRED_METADATA if key not in metadata]
        if missing:
            raise ValueError(
                f"The metadata lacks {missing}: the trained reranker's card reports them, so pass "
                f"{list(REQUIRED_METADATA)} (plus any other settings, e.g. max_length, max_doc_tokens, corpus)."
            )
        return super().normalise_metadata(metadata)

    def prepare_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return validate_row(row)


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
    return RerankDataWriter.complete_chunks(folder)


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
