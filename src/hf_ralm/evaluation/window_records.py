"""Resumable evaluation: the records of each chunk of windows, saved in ``output_dir`` as soon as they are done.

An evaluation ([`evaluate`][hf_ralm.evaluate]: ``hf-ralm eval-lm``, and with ``score=False`` ``hf-ralm retrieve``)
runs its windows in chunks of ``chunk_size`` through the run harness ([`ChunkRun`][hf_ralm.ChunkRun]), each chunk end
to end (retrieve, rerank or gate, score), and with ``output_dir`` saves each chunk's per-window records:

```text
OUTPUT_DIR/
  eval.json            the figures, written once at the end (atomically)
  windows/
    settings.json      what the records depend on: model, tokenizer, data, retrieval, RALM settings, batching
    chunk-00000000-00000256.json.gz   one record per window: its passages, the choice, ranking NLLs, gate score
                                      and NLLs (a RecordStore chunk)
```

A rerun with the same settings reads the saved records and goes on with the first window without one; as every chunk
is computed the same way whether the run was interrupted or not, the figures are the same to the last digit. A rerun
with other settings is refused ([`OutputFolderError`][hf_ralm.errors.OutputFolderError], naming what differs) unless
``overwrite``.

Every chunk records how many tokens its windows score (``num_scored_tokens``), and a chunk read back must hold the
records of the windows its name says, each with as many NLLs as its window scores (none for ``retrieve``): a chunk
altered or damaged is refused by name, or moved aside and computed again (``repair``; see ``hf_ralm.runs.store``).

Examples:
    ```python
    with WindowRecordWriter("out/windows", settings, chunk_size=256, windows=plan.windows) as writer:
        saved = writer.rows()                                                    # WindowRecords, window 0 first
    ```
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..config.configuration_ralm import RalmConfig
from ..core.identity import run_identity
from ..core.passages import Passage
from ..runs.store import RecordStore
from ..runs.fingerprints import ids_fingerprint
from ..retrieval.base import retriever_identity
from ..retrieval.dataset import retrieval_source_digest
from ..core.windows import Window

RECORDS_DIR = "windows"
EVAL_FILE = "eval.json"


def run_settings(*, model, tokenizer, ids: Sequence[int], retriever, config: RalmConfig, retrieval_file: str | None,
                 max_length: int, batch_size: int, reuse_prefix_kv: bool, scored: bool, chunk_size: int) -> dict:
    """Everything an evaluation's per-window records depend on, as ``WindowRecordWriter`` compares it: the model
    (``hf_ralm.core.modeling_utils.model_identity``), the tokenizer, the data (its token ids' count and digest), the
    retriever (``hf_ralm.retrieval.base.retriever_identity``: its corpus by fingerprint, not its folder) or retrieval
    file or dataset (its contents' digest), the RALM settings, the window length and the batching (the batch size
    changes fp32 results in their last digits).

    Args:
        model: the reader.
        tokenizer: its tokenizer (by its ``name_or_path``).
        ids: the evaluated token ids.
        retriever: the retriever (``None``: none, or a retrieval file).
        config: the RALM settings.
        retrieval_file: the retrieval file or dataset the passages come from (``None``: none).
        max_length: the window length.
        batch_size: the batch size setting.
        reuse_prefix_kv: whether passages' keys/values are reused.
        scored: whether the windows are scored (``False``: ``retrieve``).
        chunk_size: the windows per chunk.

    Returns:
        The reader's identity, every RALM setting, ``window_length`` and the parts above, by name.

    Examples:
        ```python
        run_settings(model=model, tokenizer=tokenizer, ids=ids, retriever=None, config=RalmConfig(),
                     retrieval_file=None, max_length=512, batch_size=8, reuse_prefix_kv=True, scored=True,
                     chunk_size=256)["window_length"]   # 512
        ```
    """
    return run_identity(
        model, config, window_length=max_length,
        tokenizer=getattr(tokenizer, "name_or_path", None),
        data=ids_fingerprint(ids),
        retriever=None if retriever is None else retriever_identity(retriever),
        retrieval_file=None if retrieval_file is None else retrieval_source_digest(retrieval_file),
        batch_size=batch_size,
        reuse_prefix_kv=reuse_prefix_kv,
        scored=scored,
        chunk_size=chunk_size,
    )


@dataclass
class WindowRecord:
    """One window's record: what the evaluation needs of it to go on without computing it again.

    Attributes:
        window: the window's index.
        passages: its passages (retrieval order).
        chosen: the index of the one put in context first (-1: none).
        ranking_nlls: the reranker's ranking NLLs.
        gate_score: the gate's score.
        nlls: the NLLs of the tokens it scores (``None`` when not scored: ``retrieve``).

    Examples:
        >>> record = WindowRecord(3, [Passage("7", "Rome", "rome was", 6.5)], 0, None, None, [2.5, 1.0])
        >>> record.to_row()["passages"], WindowRecord.from_row(record.to_row()) == record
        ([{'id': '7', 'title': 'Rome', 'text': 'rome was', 'score': 6.5}], True)
    """

    window: int
    passages: list[Passage]
    chosen: int
    ranking_nlls: list[float] | None
    gate_score: float | None
    nlls: list[float] | None

    def to_row(self) -> dict:
        return {**self.__dict__, "passages": [p.to_dict() for p in self.passages]}

    @classmethod
    def from_row(cls, row: dict) -> "WindowRecord":
        return cls(**{**row, "passages": [Passage(**p) for p in row["passages"]]})


class WindowRecordWriter(RecordStore):
    """The per-window records of an evaluation (``WindowRecord``; see the module docstring).

    Args:
        folder: the records' folder.
        settings: what the records depend on (``run_settings``).
        windows: the evaluation's windows: every record read back is checked against its window, as many NLLs as it
            scores when the settings say ``scored``, none otherwise.
        **options: [`RecordStore`][hf_ralm.RecordStore]'s options.
    """

    what = "window records"
    record_type = WindowRecord

    def __init__(self, folder: str | Path, settings: dict, *, windows: Sequence[Window] | None = None,
                 **options: Any) -> None:
        self.windows = windows
        super().__init__(folder, settings, **options)

    @classmethod
    def chunk_counts(cls, rows: Sequence[dict]) -> dict[str, int]:
        return {**super().chunk_counts(rows), "num_scored_tokens": sum(len(row["nlls"] or []) for row in rows)}

    def check_chunk(self, span: tuple[int, int], records: Sequence[WindowRecord]) -> None:
        """Raise a ``ValueError`` unless the chunk holds the records of the windows ``span``, each with its
        window's NLLs (with ``windows``)."""
        super().check_chunk(span, records)
        held = [record.window for record in records]
        if held != list(range(*span)):
            raise ValueError(f"it holds the records of windows {held[:3]}..., not of windows {span[0]} to "
                             f"{span[1] - 1}")
        if self.windows is None:
            return
        if span[1] > len(self.windows):
            raise ValueError(f"it holds windows beyond the text's {len(self.windows)}")
        for record in records:
            wanted = self.windows[record.window].num_scored if self.settings["scored"] else None
            got = None if record.nlls is None else len(record.nlls)
            if got != wanted:
                raise ValueError(f"window {record.window} holds {'no' if got is None else got} NLLs, where the run "
                                 f"scores {'none' if wanted is None else wanted} of its tokens")
