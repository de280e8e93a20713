"""Resumable evaluation: the records of each chunk of windows, saved in ``output_dir`` as soon as they are done.

An evaluation (:func:`~hf_ralm.evaluation.evaluate_perplexity`, ``hf-ralm eval-lm``, and
:func:`~hf_ralm.evaluation.evaluate_retrieval`, ``hf-ralm retrieve``) runs its windows in chunks of ``chunk_size``,
each chunk end to end (retrieve, rerank or gate, score), and with ``output_dir`` saves each chunk's per-window
records::

    OUTPUT_DIR/
      eval.json            the figures, written once at the end (atomically)
      windows/
        settings.json      what the records depend on: model, tokenizer, data, retrieval, RALM settings, batching
        chunk-00000000-00000256.json.gz   one record per window: its passages, the choice, ranking NLLs, gate score
                                          and NLLs (a :class:`~hf_ralm.records.RecordStore` chunk)

A rerun with the same settings reads the saved records and goes on with the first window without one; as every chunk
is computed the same way whether the run was interrupted or not, the figures are the same to the last digit. A rerun
with other settings is refused (:class:`~hf_ralm.errors.OutputFolderError`, naming what differs) unless
``overwrite``.

Example:
    >>> settings = run_settings(model, tokenizer, ids, retriever, config, None, 512, 8, True, True,
    ...                         256)                                                 # doctest: +SKIP
    >>> with WindowRecordWriter("out/windows", settings, chunk_size=256) as writer:  # doctest: +SKIP
    ...     saved = writer.saved_records()
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from .records import RecordStore, digest, titles_fingerprint
from .configuration_ralm import RALM_FIELDS, RalmConfig
from .errors import OutputFolderError
from .passages import Passage

RECORDS_DIR = "windows"
EVAL_FILE = "eval.json"
CHUNK_SIZE = 256
"""Windows per chunk by default (1,024 tokens at s=4): what an interrupted run can lose at most, and how many windows
are retrieved, ranked and scored together."""


class WindowRecordWriter(RecordStore):
    """The per-window records of an evaluation (see the module docstring)."""

    what = "window records"

    def saved_records(self) -> list[dict]:
        """The records of the complete chunks, window 0 first; an :class:`~hf_ralm.errors.OutputFolderError` when
        they are not the windows 0, 1, ... in order (a folder edited by hand)."""
        records = self.rows()
        for i, record in enumerate(records):
            if record.get("window") != i:
                raise OutputFolderError(f"{self.folder} holds a record of window {record.get('window')} where window "
                                        f"{i}'s should be: the folder was altered; overwrite (--overwrite, "
                                        "overwrite=True) to start afresh.")
        return records


def model_identity(model) -> dict[str, Any]:
    """What identifies a model in settings that must compare equal on another machine: its name (a local folder's
    name, not its path; a Hub id as it is; the class name when it has neither), class, parameter count and dtype.

    Example:
        >>> model_identity(model)                                                                # doctest: +SKIP
        {'reader': 'smollm2-135m-instruct', 'reader_class': 'LlamaForCausalLM', 'reader_parameters': 134515008,
         'dtype': 'bfloat16'}
    """
    name = getattr(model.config, "name_or_path", None) or type(model).__name__
    return {"reader": os.path.basename(os.path.normpath(name)) if os.path.isdir(name) else name,
            "reader_class": type(model).__name__,
            "reader_parameters": sum(p.numel() for p in model.parameters()),
            "dtype": str(model.dtype).removeprefix("torch.")}


def model_path(model) -> str:
    """Where a model was loaded from (a local folder's absolute path, else its name): what ``reproduce`` records."""
    name = getattr(model.config, "name_or_path", None) or type(model).__name__
    return os.path.abspath(name) if os.path.isdir(name) else name


def retriever_identity(retriever) -> dict[str, Any]:
    """What identifies retrieved passages in settings that must compare equal elsewhere: the retriever kind, the
    fingerprint of the corpus its index was built from (passage ids are row numbers of that corpus's passages), what
    the index records about its scoring and text analysis (another analysis ranks other passages) and its forbidden
    titles; never the index's path, so that records made here resume from a copy of the index elsewhere.

    Example:
        >>> retriever_identity(bm25)["corpus_fingerprint"]                                        # doctest: +SKIP
        'e0b8cc01f966ef0833ed9cfaab95c0c96c33500d3dd9b27f39c2a1213be59870'
    """
    from .retrieval.base import Retriever
    from .retrieval.index_folder import read_index_info

    if not isinstance(retriever, Retriever):
        return {"retriever": type(retriever).__name__, "corpus_fingerprint": None}
    recorded = read_index_info(retriever.index_dir) or {}
    return {"retriever": retriever.name, "corpus_fingerprint": recorded.get("fingerprint"),
            # not its file sizes or corpus paths: the same index, copied or moved, holds the same passages
            "index": {key: value for key, value in recorded.items() if key not in ("files", "corpus", "fingerprint")},
            "forbidden_titles": titles_fingerprint(retriever.forbidden_titles)}


def run_settings(model, tokenizer, ids: Sequence[int], retriever, config: RalmConfig, retrieval_file: str | None,
                 max_length: int, batch_size: int, reuse_prefix_kv: bool, scored: bool, chunk_size: int) -> dict:
    """Everything an evaluation's per-window records depend on, as :class:`WindowRecordWriter` compares it: the
    model (name, class, dtype, size), the tokenizer, the data (its token ids' count and digest), the retriever (its
    config) or retrieval file (its contents' digest), the RALM settings, the window length and the batching (the
    batch size changes fp32 results in their last digits)."""
    retriever_config = retriever.config() if callable(getattr(retriever, "config", None)) else type(retriever).__name__
    if isinstance(retriever_config, dict) and "forbidden_titles" in retriever_config:
        retriever_config = {**retriever_config,
                            "forbidden_titles": titles_fingerprint(retriever_config["forbidden_titles"])}
    file_digest = None
    if retrieval_file is not None:
        file_digest = digest(Path(retrieval_file).read_bytes())
    return {
        "model": getattr(model.config, "_name_or_path", None),
        "model_class": type(model).__name__,
        "dtype": str(model.dtype),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer": getattr(tokenizer, "name_or_path", None),
        "data": f"{len(ids)} tokens, {digest(list(ids))}",
        "retriever": None if retriever is None else retriever_config,
        "retrieval_file": file_digest,
        **{name: getattr(config, name) for name in sorted(RALM_FIELDS)},
        "window_length": max_length,
        "batch_size": batch_size,
        "reuse_prefix_kv": reuse_prefix_kv,
        "scored": scored,
        "chunk_size": chunk_size,
    }


def window_record(index: int, passages: Sequence[Passage], chosen: int, ranking_nlls: list[float] | None,
                  gate_score: float | None, nlls: list[float] | None) -> dict:
    """One window's record: what the evaluation needs of it to go on without computing it again.

    Example:
        >>> window_record(3, [Passage("7", "Rome", "rome was", 6.5)], 0, None, None, [2.5, 1.0])["passages"]
        [{'id': '7', 'title': 'Rome', 'text': 'rome was', 'score': 6.5}]
    """
    return {"window": index, "passages": [p.to_dict() for p in passages], "chosen": chosen,
            "ranking_nlls": ranking_nlls, "gate_score": gate_score, "nlls": nlls}


def record_passages(record: dict) -> list[Passage]:
    """The passages of a saved :func:`window_record`."""
    return [Passage(**passage) for passage in record["passages"]]
