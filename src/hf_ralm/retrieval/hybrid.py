"""Hybrid retrieval, ``retriever="hybrid"``: reciprocal-rank fusion (RRF) of a BM25 retriever and a dense one.

Each backend returns its own ranked list (``max(k, 20)`` deep); a passage's fused score is the sum over the lists
that hold it of ``1 / (k_rrf + rank)`` (rank 1 for the best, Cormack et al. 2009, ``k_rrf=60``). Both backends must
index the same passages (same corpus fingerprint, checked), so that their passage ids (row numbers in corpus order)
coincide. ``HybridRetriever.build_or_load(corpus, index_dir)`` keeps both indexes in one folder: ``<index_dir>/bm25``
(or ``<index_dir>/lucene``) and ``<index_dir>/dense``.

Examples:
    >>> rrf_fuse([["a", "b"], ["b", "c"]], k_rrf=60)[0]
    ('b', 0.03252247488101534)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

from ..core.passages import Passage
from ..errors import SettingError
from ..runs.shards import Shard
from .base import RETRIEVER_CONFIG_FILE, Retriever, checked_queries
from .dense_options import DENSE_QUERY_LENGTH, DenseBuildOptions
from .index_builds import check_build_folder
from .local import IndexOptions, IndexSummary, LocalIndexRetriever
from .registry import retriever_class

K_RRF = 60
MIN_DEPTH = 20
SPARSE_NAMES = ("bm25", "lucene")  # what the sparse side may be
SIDE_ENTRIES = tuple(entry for name in (*SPARSE_NAMES, "dense") for entry in (name, f"{name}.tmp", f".{name}.lock"))
"""What a hybrid index folder may hold: its sides' index folders, their build folders while they are built, and the
sides' build locks that hf-ralm kept there before they moved to its cache."""


def rrf_fuse(ranked_lists: Sequence[Sequence[str]], k_rrf: float = K_RRF) -> list[tuple[str, float]]:
    """Reciprocal-rank fusion: ``[(id, score)]`` best first, ``score = Σ 1 / (k_rrf + rank)`` over the lists
    holding ``id`` (ranks from 1; an id repeated within one list counts at its best rank). Ties keep the order in
    which ids first appear, reading the lists one after the other."""
    if k_rrf < 0:
        raise ValueError(f"k_rrf must be non-negative, got {k_rrf}.")
    scores: dict[str, float] = {}
    for ranked in ranked_lists:
        seen = set()
        for rank, item in enumerate(ranked, 1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k_rrf + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])  # stable: ties keep first appearance


def _corpus_identity(retriever) -> tuple:
    info = getattr(retriever, "info", None) or {}
    return info.get("fingerprint"), info.get("num_passages")


@dataclass(frozen=True)
class HybridOptions(IndexOptions):
    """The hybrid backend's options: its ``sparse`` side (``"bm25"`` or ``"lucene"``) and its ``n_threads``, the
    dense side's ``encoder``, ``pooling``, ``faiss_factory`` and ``encoder_dtype`` (``None``: the dense backend's
    defaults), and the fusion's ``k_rrf`` and ``depth`` (each side's list is ``max(k, depth)`` deep)."""

    encoder: str | None = None
    pooling: str | None = None
    faiss_factory: str | None = None
    encoder_dtype: str | None = None
    sparse: str = "bm25"
    k_rrf: float = K_RRF
    depth: int = MIN_DEPTH
    n_threads: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.sparse not in SPARSE_NAMES:
            raise ValueError(f"The hybrid retriever's sparse side is one of {SPARSE_NAMES}, got {self.sparse!r}.")


class HybridRetriever(LocalIndexRetriever):
    """RRF of a sparse ([`BM25Retriever`][hf_ralm.retrieval.BM25Retriever] or
    [`LuceneRetriever`][hf_ralm.retrieval.lucene.LuceneRetriever]) and a dense retriever over the same passages.

    Its folder holds no index of its own, only its sides' (``<index_dir>/<sparse>``, ``<index_dir>/dense``), each
    built, reused and opened by its own backend.

    Args:
        sparse: The sparse side, an opened BM25 or Lucene retriever.
        dense: The dense side, over the same passages (the same corpus fingerprint and passage count).
        k_rrf: The fusion's ``k_rrf``: a passage scores ``1 / (k_rrf + rank)`` per list that holds it.
        depth: Each side's list is ``max(k, depth)`` deep.

    Raises:
        ValueError: a side records no corpus fingerprint, or the two sides were built from different corpora (or
            passage sizes).

    Examples:
        ```python
        retriever = HybridRetriever.build_or_load("wiki.jsonl.gz", "wiki-hybrid")   # wiki-hybrid/{bm25,dense}
        retriever.retrieve(["the emperor of Rome"], k=2)
        ```
    """

    name = "hybrid"
    Options = HybridOptions
    BuildOptions = DenseBuildOptions  # the dense side's; the sparse side's build takes none
    default_query_length = DENSE_QUERY_LENGTH
    saved_path_options = {"encoder": ("str",), **LocalIndexRetriever.saved_path_options}
    saved_parts = ("sparse", "dense")

    def __init__(self, sparse: Retriever, dense: Retriever, k_rrf: float = K_RRF, depth: int = MIN_DEPTH):
        sparse_id, dense_id = _corpus_identity(sparse), _corpus_identity(dense)
        if sparse_id[0] is None or dense_id[0] is None:
            raise ValueError(
                "The hybrid retriever needs two indexes built from the same corpus files (it checks their corpus "
                f"fingerprints so that passage ids coincide); got fingerprints {sparse_id[0]!r} and {dense_id[0]!r}."
            )
        if sparse_id != dense_id:
            raise ValueError(
                "The hybrid retriever's two indexes were built from different corpora (or passage sizes): "
                f"{getattr(sparse, 'index_dir', sparse)!r} has fingerprint {sparse_id[0][:12]}… "
                f"({sparse_id[1]} passages), {getattr(dense, 'index_dir', dense)!r} {dense_id[0][:12]}… "
                f"({dense_id[1]} passages). Build both from the same --corpus and --words-per-passage."
            )
        self.sparse, self.dense = sparse, dense
        self.k_rrf, self.depth = k_rrf, depth
        self.info = {"fingerprint": sparse_id[0], "num_passages": sparse_id[1]}

    @property
    def forbidden_titles(self) -> frozenset[str]:
        return frozenset(getattr(self.sparse, "forbidden_titles", ())) | frozenset(
            getattr(self.dense, "forbidden_titles", ()))

    def passages_by_id(self, ids: Sequence[str]) -> list[Passage]:
        return self.sparse.passages_by_id(ids)  # both sides number the same corpus's passages alike

    def index_record(self) -> dict:
        """The common corpus's ``fingerprint`` and size, and each side's
        [`identity`][hf_ralm.retrieval.Retriever.identity] (its folder has no ``hf_ralm_index.json`` of its own: what
        decides the ranking is the two sides' and the fusion's)."""
        return {**self.info, "k_rrf": self.k_rrf, "depth": self.depth,
                "sparse": self.sparse.identity(), "dense": self.dense.identity()}

    @property
    def index_dir(self) -> str:
        """The folder holding both sides' indexes (their common parent)."""
        return os.path.commonpath([self.sparse.index_dir, self.dense.index_dir])

    @classmethod
    def _load(cls, index_dir: str, options: HybridOptions) -> "HybridRetriever":
        """Both sides, ``<index_dir>/<sparse>`` and ``<index_dir>/dense``, each opened by its own backend or, with a
        corpus, built or reused there (their own build-or-load, under their own folders' locks)."""
        common = {"corpus": options.corpus, "forbidden_titles": options.forbidden_titles,
                  "words_per_passage": options.words_per_passage}
        sparse_side = retriever_class(options.sparse).from_options(
            index_dir=os.path.join(index_dir, options.sparse), n_threads=options.n_threads, **common)
        dense_side = retriever_class("dense").from_options(
            index_dir=os.path.join(index_dir, "dense"), encoder=options.encoder, pooling=options.pooling,
            faiss_factory=options.faiss_factory, encoder_dtype=options.encoder_dtype, **common)
        return cls(sparse_side, dense_side, k_rrf=options.k_rrf, depth=options.depth)

    @classmethod
    def build_shared(cls, corpus: str | Sequence[str], index_dir: str | os.PathLike | None = None, *,
                     shard: Shard | None = None, **options: Any) -> IndexSummary:
        """As ``LocalIndexRetriever.build_shared``, by one process only: its workers would each build both sides.

        Args:
            corpus: The corpus file(s).
            index_dir: The folder of both sides' indexes (``None``: one in hf-ralm's cache).
            shard: This worker's part of the build, of one worker only (``None``: one process).
            **options: ``words_per_passage`` and the backend's own options (its ``Options``; ``None``: its default).

        Returns:
            The built (or reused) index's ``IndexSummary``.

        Raises:
            SettingError: ``shard`` has more than one worker; the message says how to share the dense side's
                encoding first.
        """
        if shard is not None and shard.count > 1:
            raise SettingError(
                "a hybrid index is built by one process; share the encoding of its dense side first: hf-ralm index "
                "--retriever dense --index-dir DIR/dense ... with --num-shards (or under torchrun or a Slurm array), "
                "then hf-ralm index --retriever hybrid --index-dir DIR reuses it.")
        return super().build_shared(corpus, index_dir, shard=shard, **options)

    @classmethod
    def _build_or_reuse(cls, index_dir: str, options: HybridOptions) -> "HybridRetriever":
        """A folder that holds anything but the sides' folders is never built in (the sides' builds check their own
        folders)."""
        check_build_folder(index_dir, cls.name, parts=SIDE_ENTRIES)
        return cls._load(index_dir, options)

    @classmethod
    def from_config(cls, config: dict, *, base_dir: str | None = None, config_file: str = RETRIEVER_CONFIG_FILE,
                    **overrides) -> "HybridRetriever":
        """Rebuild both sides from their saved configs (``config["sparse"]``, ``config["dense"]``; ``encoder`` applies
        to the dense one, ``forbidden_titles`` and ``corpus`` to both). A description without sides, such as
        ``{"type": "hybrid", "index_dir": ...}``, or an ``index_dir`` override, opens that folder with
        ``build_or_load``.

        Args:
            config: The saved description (as [`config`][hf_ralm.retrieval.hybrid.HybridRetriever.config] gives it).
            base_dir: The saved folder the description's paths are relative to.
            config_file: The file in ``base_dir`` the description was read from, as errors name it.
            **overrides: Values that replace the saved ones (``None``: not given).

        Returns:
            The hybrid retriever.

        Raises:
            ValueError: an override is no option of the hybrid retriever.
        """
        overrides = {key: value for key, value in overrides.items() if value is not None}
        if "sparse" not in config or "index_dir" in overrides:
            settings = {k: v for k, v in config.items() if k not in ("sparse", "dense")}
            if "sparse" in config:
                settings["sparse"] = config["sparse"]["type"]
            return super().from_config(settings, base_dir=base_dir, config_file=config_file, **overrides)
        forbidden_titles = overrides.pop("forbidden_titles", config.get("forbidden_titles"))
        encoder, corpus = overrides.pop("encoder", None), overrides.pop("corpus", None)
        if overrides:
            raise ValueError(f"The hybrid retriever has no option {', '.join(map(repr, sorted(overrides)))}.")
        sides = [
            retriever_class(config[side]["type"]).from_config(
                config[side], base_dir=base_dir, config_file=config_file, corpus=corpus,
                forbidden_titles=forbidden_titles, **extra)
            for side, extra in (("sparse", {}), ("dense", {"encoder": encoder}))
        ]
        return cls(*sides, k_rrf=config.get("k_rrf", K_RRF), depth=config.get("depth", MIN_DEPTH))

    def __len__(self) -> int:
        return len(self.dense)

    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """Top-``k`` passages per query by fused score (``Passage.score``), best first."""
        queries = checked_queries(queries, k)
        if not queries:
            return []
        depth = max(k, self.depth)
        results = []
        for sparse_hits, dense_hits in zip(self.sparse.retrieve(queries, depth), self.dense.retrieve(queries, depth)):
            by_id = {p.id: p for p in [*dense_hits, *sparse_hits]}
            fused = rrf_fuse([[p.id for p in sparse_hits], [p.id for p in dense_hits]], self.k_rrf)[:k]
            results.append([Passage(i, by_id[i].title, by_id[i].text, score) for i, score in fused])
        return results

    def config(self) -> dict:
        """Both sides' configs, ``k_rrf``, ``depth`` and the forbidden titles."""
        return {"type": self.name, "k_rrf": self.k_rrf, "depth": self.depth,
                "forbidden_titles": sorted(self.forbidden_titles), "sparse": self.sparse.config(),
                "dense": self.dense.config()}

    def _saved_config(self, save_directory: str, index_copy: str | None) -> dict:
        """Each side's saved config; with an index copy, the sides go to ``<index_copy>/<sparse name>`` and
        ``<index_copy>/dense``, the layout of ``build_or_load``."""
        sides = {}
        for side in ("sparse", "dense"):
            retriever = getattr(self, side)
            copy = None if index_copy is None else os.path.join(index_copy, retriever.name)
            sides[side] = retriever._saved_config(save_directory, copy)
        return {**self.config(), **sides}
