"""Building an index, also by many workers: what ``hf-ralm index`` runs. The backend decides how its workers share a
build (``LocalIndexRetriever.build_shared``): a dense index's encoding chunk by chunk, a hybrid one by one process, the
others by one worker while the others wait on the folder's lock, then open its index."""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import SettingError
from ..runs.shards import Shard
from .corpus import WORDS_PER_PASSAGE
from .local import LocalIndexRetriever
from .registry import retriever_class


def build_index(retriever: str, corpus: str | Sequence[str], index_dir: str | None = None, *,
                words_per_passage: int = WORDS_PER_PASSAGE, num_shards: int | None = None,
                shard_id: int | None = None, **options: Any) -> Any:
    """Build (or reuse, when it was built from the same files and settings) ``retriever``'s index of ``corpus`` in
    ``index_dir`` (default: a folder in hf-ralm's cache), as this worker's part of the build.

    Args:
        retriever: A registered retriever with a local index (``"bm25"``, ``"lucene"``, ``"dense"``, ``"hybrid"``,
            or one added with [`register_retriever`][hf_ralm.retrieval.register_retriever]).
        corpus: The corpus file(s).
        index_dir: The index folder.
        words_per_passage: The passage size (0 keeps the corpus rows as they are).
        num_shards: The workers that share the build (default: torchrun/accelerate's or a Slurm array's variables,
            else 1).
        shard_id: This worker's part, 0 to ``num_shards - 1``.
        **options: The backend's options (its ``Options``; ``None``: its default), e.g. the dense backend's
            ``encoder``, ``pooling``, ``faiss_factory`` (by default ``"Flat"``, exact search) and ``encoder_dtype``:
            what ``hf-ralm index`` gives from the flags of the backend's ``BuildOptions``.

    Returns:
        An ``IndexSummary``; a dense build shared by workers, its ``DenseBuild`` (also whether it is complete and
            what this worker encoded).

    Raises:
        SettingError: the retriever keeps no local index, or cannot share its build among these workers (hybrid).

    Examples:
        ```python
        build_index("bm25", "wiki.jsonl.gz", "wiki-bm25")            # IndexSummary(index_dir='wiki-bm25', ...)
        build_index("dense", "wiki.jsonl.gz", "wiki-dense", num_shards=4, shard_id=1)   # this worker's quarter
        ```
    """
    backend = retriever_class(retriever)
    if not issubclass(backend, LocalIndexRetriever):
        raise SettingError(f"The {retriever} retriever keeps no local index, so there is none to build: open it with "
                           f"load_retriever({retriever!r}, ...) or --retriever {retriever}.")
    shard = Shard.resolve(num_shards, shard_id)
    return backend.build_shared(corpus, index_dir, shard=shard, words_per_passage=words_per_passage, **options)
