"""What the points of a figure script run on, loaded once and only when a point needs it: the reader (one at a time;
points come model by model, so each model loads once per script), its token ids of each evaluation text, and the
retrievers, keyed by kind, corpus and the evaluation text whose titles they must not return.

Retrievers and their index folders, by corpus:

* ``"whole sample"``: the Wikipedia sample (--corpus), indexed in --index-dir (bm25s), --lucene-index-dir and
  --dense-index-dir (MiniLM, mean pooling); ``hybrid`` fuses the bm25 and dense ones (RRF).
* ``"1,000-article subset"`` (:meth:`Resources.subset`, the subset of benchmarks/speed/bench_retrievers.py,
  --num-articles and --seed): its corpus and indexes in that script's layout, written there when missing.

A missing or stale index is built from the corpus (``build_or_load``); a missing dense one is encoded in bfloat16
(``hf-ralm index --encoder-dtype bfloat16``), which takes about 3 hours for the whole sample on a 2-core CPU (about 5
in float32), and an interrupted build resumes after its last finished chunk. An existing dense index is used in the
precision it records.

    >>> index_identity("/nonexistent")
    'missing'
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Callable

from benchmarks.bench_setup import READERS, eval_sets, load_reader

WHOLE = "whole sample"
RETRIEVERS = ("none", "bm25", "lucene", "dense", "hybrid")
DENSE_BUILD_NOTE = ("the dense index {index} is not built yet; building it now. Encoding passages with MiniLM in "
                    "bfloat16 takes about 3 hours for the whole sample's ~666k on a 2-core CPU (minutes on a GPU, "
                    "~6 minutes for the 1,000-article subset). The build is resumable: interrupt it at any time and "
                    "rerun the same command (or `hf-ralm index --retriever dense --pooling mean --encoder-dtype "
                    "bfloat16 --corpus {corpus} --index-dir {index}`, e.g. in the background) and it goes on after its "
                    "last finished chunk of 10,000 passages.")
NEW_DENSE_DTYPE = "bfloat16"  # a missing dense index is encoded in it: 1.6x faster on a bf16 CPU (docs/dense.md)


def index_identity(index_dir: str) -> str:
    """A short hash of the index folder's ``hf_ralm_index.json`` (corpus fingerprint, analysis, encoder ...), so that
    rows measured on another index never count as done; ``"missing"`` when no index is built there yet."""
    from hf_ralm.retrieval import read_index_info

    info = read_index_info(index_dir)
    if info is None:
        return "missing"
    info.pop("corpus", None)  # where the corpus files were, not what they hold (the fingerprint)
    return hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()[:12]


class Resources:
    """Lazily loaded readers, token ids and retrievers for the points of one script (``args``: its flags).
    ``load_reader(name, dtype) -> (model, tokenizer)`` replaces the loading of real models (tests pass tiny ones)."""

    def __init__(self, args, load_reader: Callable | None = None):
        self.args = args
        self._load_reader = load_reader or (lambda name, dtype: _load_real_reader(args, name, dtype))
        self._reader_key, self._reader, self._ids = None, None, {}
        self._retrievers: dict[tuple, object] = {}
        self._subset_dir = None

    def dtype(self, model: str) -> str:
        """The dtype of ``model``'s points: --dtype, else the tables' (``READERS``)."""
        return self.args.dtype or READERS[model].dtype

    def reader(self, model: str, dtype: str):
        """``(model, tokenizer)``; loading another one releases the previous."""
        if self._reader_key != (model, dtype):
            self._reader, self._ids = None, {}
            print(f"[figures] loading {model} ({dtype})", file=sys.stderr, flush=True)
            self._reader, self._reader_key = self._load_reader(model, dtype), (model, dtype)
        return self._reader

    def ids(self, model: str, dtype: str, data: str) -> list[int]:
        """The current reader's token ids of the whole evaluation text ``data``."""
        from hf_ralm import load_dataset_text, tokenize_text

        _, tokenizer = self.reader(model, dtype)
        if data not in self._ids:
            rows, _ = self._data(data)
            self._ids[data] = tokenize_text(tokenizer, load_dataset_text(rows))
        return self._ids[data]

    def _data(self, data: str) -> tuple[str, str]:
        from benchmarks.bench_setup import HELDOUT_COMMAND

        rows, titles = eval_sets(self.args.heldout_dir)[data]
        if not os.path.isfile(rows):
            raise FileNotFoundError(f"{rows} does not exist; the held-out set is made by {HELDOUT_COMMAND}")
        return rows, titles

    # -- indexes and retrievers ------------------------------------------------------------------------------------

    def corpus_file(self, corpus: str) -> str:
        return self.args.corpus if corpus == WHOLE else os.path.join(self.subset_dir(), "corpus.jsonl")

    def subset(self) -> str:
        """The subset's name, as the points' ``corpus``."""
        return f"{self.args.num_articles:,}-article subset"

    def subset_dir(self) -> str:
        """bench_retrievers.py's subset folder (--subset-out, --num-articles, --seed), its corpus written if missing."""
        if self._subset_dir is None:
            from benchmarks.speed.bench_retrievers import ensure_subset

            _, titles = self._data("held-out Wikipedia")
            a = self.args
            self._subset_dir = ensure_subset(a.corpus, titles, a.subset_out, a.num_articles, a.seed)
        return self._subset_dir

    def index_dirs(self, kind: str, corpus: str) -> list[str]:
        """The index folders behind a retriever (hybrid: its bm25 and dense ones)."""
        if kind == "none":
            return []
        if kind == "hybrid":
            return self.index_dirs("bm25", corpus) + self.index_dirs("dense", corpus)
        if corpus == WHOLE:
            return [getattr(self.args, "index_dir" if kind == "bm25" else f"{kind}_index_dir")]
        from benchmarks.speed.bench_retrievers import subset_index_dirs

        return [subset_index_dirs(self.subset_dir())[kind]]

    def index_id(self, kind: str, corpus: str | None) -> str:
        """What the points' ``index_id`` holds: the identities of the retriever's index folders ("" for none)."""
        return "+".join(index_identity(d) for d in self.index_dirs(kind, corpus)) if corpus else ""

    def retriever(self, kind: str, corpus: str | None, data: str):
        """The retriever ``kind`` over ``corpus`` that never returns the passages of ``data``'s forbidden titles
        (``None`` for ``"none"``), built or loaded once."""
        key = (kind, corpus, data)
        if kind != "none" and key not in self._retrievers:
            self._retrievers[key] = self._open(kind, corpus, data)
        return self._retrievers.get(key)

    def _open(self, kind: str, corpus: str, data: str):
        from hf_ralm.retrieval import HybridRetriever, load_retriever, read_forbidden_titles

        if kind == "hybrid":  # the two sides already open (or opened now) for this corpus and data
            return HybridRetriever(self.retriever("bm25", corpus, data), self.retriever("dense", corpus, data))
        (index_dir,) = self.index_dirs(kind, corpus)
        source = self.corpus_file(corpus)
        options = {"pooling": "mean"} if kind == "dense" else {}
        if kind == "dense" and index_identity(index_dir) == "missing":
            print("[figures] " + DENSE_BUILD_NOTE.format(index=index_dir, corpus=source), file=sys.stderr, flush=True)
            options["encoder_dtype"] = NEW_DENSE_DTYPE
        print(f"[figures] opening {kind} over the {corpus} ({index_dir})", file=sys.stderr, flush=True)
        return load_retriever(kind, index_dir=index_dir, corpus=[source],
                              forbidden_titles=read_forbidden_titles(self._data(data)[1]), **options)


def add_subset_flags(parser) -> None:
    """bench_retrievers.py's subset flags, for the scripts that use the subset."""
    from benchmarks.bench_setup import CACHE

    parser.add_argument("--subset-out", default=str(CACHE / "retrievers"), help="bench_retrievers.py's --out")
    parser.add_argument("--num-articles", type=int, default=1000, help="articles in the subset (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the subset's seed (default 0)")


def _load_real_reader(args, name: str, dtype: str):
    return load_reader(args.models_dir, name, dtype, args.device)
