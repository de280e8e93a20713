"""Building an index, also by many workers: what ``hf-ralm index`` runs. A dense index's encoding is shared among the
workers chunk by chunk (:func:`~hf_ralm.retrieval.dense.build_dense_index`); the other backends are built by one
worker while the others wait on the folder's lock, then open its index."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..errors import SettingError
from ..runs.shards import Shard
from .corpus import WORDS_PER_PASSAGE
from .index_builds import default_index_dir
from .registry import retriever_class

if TYPE_CHECKING:
    from .dense import DenseBuild

DENSE_KINDS = ("dense", "hybrid")
"""The retrievers with a dense encoder, which take the encoder's options."""


@dataclass(frozen=True)
class IndexSummary:
    """An index built or reused: its folder and its passages."""

    index_dir: str
    num_passages: int


def build_index(retriever: str, corpus: str | Sequence[str], index_dir: str | None = None, *,
                words_per_passage: int = WORDS_PER_PASSAGE, encoder: str | None = None, pooling: str | None = None,
                faiss_factory: str | None = None, encoder_dtype: str | None = None, num_shards: int | None = None,
                shard_id: int | None = None) -> IndexSummary | "DenseBuild":
    """Build (or reuse, when it was built from the same files and settings) ``retriever``'s index of ``corpus`` in
    ``index_dir`` (default: a folder in hf-ralm's cache). The encoder's options (``encoder``, ``pooling``,
    ``faiss_factory``: by default ``"Flat"``, exact search; ``encoder_dtype``) are for ``"dense"`` and ``"hybrid"``.
    Workers (``num_shards`` and ``shard_id``, or torchrun/accelerate's or a Slurm array's variables) share a dense
    index's encoding; a hybrid index is built by one process.

    Returns:
        An :class:`IndexSummary`; a dense build shared by workers, its
        :class:`~hf_ralm.retrieval.dense.DenseBuild` (also whether it is complete and what this worker encoded).

    Example::

        build_index("bm25", "wiki.jsonl.gz", "wiki-bm25")            # IndexSummary(index_dir='wiki-bm25', ...)
        build_index("dense", "wiki.jsonl.gz", "wiki-dense", num_shards=4, shard_id=1)   # this worker's quarter
    """
    options = {}
    if retriever in DENSE_KINDS:  # the dense backend only now: it is imported when used
        from .dense import DEFAULT_FACTORY

        options = {"encoder": encoder, "pooling": pooling, "faiss_factory": faiss_factory or DEFAULT_FACTORY,
                   "encoder_dtype": encoder_dtype}
    shard = Shard.resolve(num_shards, shard_id)
    if shard.count > 1 and retriever == "dense":  # the workers encode the passages' chunks in turn
        from .dense import build_dense_index

        index_dir = index_dir or default_index_dir("dense", corpus, words_per_passage)
        options = {key: value for key, value in options.items() if value is not None}
        return build_dense_index(corpus, index_dir, words_per_passage=words_per_passage, shard=shard, **options)
    if shard.count > 1 and retriever == "hybrid":
        raise SettingError(
            "a hybrid index is built by one process; share the encoding of its dense side first: hf-ralm index "
            "--retriever dense --index-dir DIR/dense ... with --num-shards (or under torchrun or a Slurm array), "
            "then hf-ralm index --retriever hybrid --index-dir DIR reuses it.")
    # bm25, lucene: one worker builds while the others wait on the folder's lock, then open its index
    built = retriever_class(retriever).build_or_load(corpus, index_dir, words_per_passage=words_per_passage, **options)
    return IndexSummary(built.index_dir, len(built))
