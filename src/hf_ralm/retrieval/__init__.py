"""Retrievers: the :class:`Retriever` contract (its options, its identity), the build-or-load of the backends with a
local index (:class:`LocalIndexRetriever`), the registry of backends (``bm25``, ``lucene``, ``dense``, ``hybrid``, and
those added with :func:`register_retriever`), loading and saving, corpus tools, retrieval files and retrieval
datasets. The backends that need optional extras (``lucene``, ``dense``, ``hybrid``) and Lucene's JVM helpers are
imported when their names are first used, as the registry imports them.

Example:
    >>> from hf_ralm.retrieval import analyze, split_passages
    >>> [p["text"] for p in split_passages([{"id": "7", "title": "Rome", "text": "a b c d e"}], words_per_passage=2)]
    ['a b', 'c d', 'e']
    >>> analyze("The Emperor's armies")
    ['emperor', 'armi']
"""

from ..utils.lazy import lazy_exports
from .analysis import ANALYSIS, analyze, analyze_texts, iter_analyzed, word_term, words
from .base import RETRIEVER_CONFIG_FILE, Retriever, RetrieverOptions, read_forbidden_titles, retriever_identity
from .bm25 import BM25_PARAMS, BM25Retriever
from .building import IndexSummary, build_index
from .corpus import WORDS_PER_PASSAGE, passage_columns, passage_rows, read_corpus, split_passages
from .dataset import RetrievalDataset, RetrievalFingerprint, push_retrieval_dataset
from .factory import load_retriever, load_retriever_from_pretrained, pretrained_folder
from .index_folder import hf_ralm_cache_dir, read_index_info
from .local import IndexOptions, LocalIndexRetriever
from .registry import RETRIEVER_NAMES, register_retriever, retriever_class, retriever_names

LAZY_EXPORTS = {"dense": ("DenseEncoder",), "hybrid": ("HybridRetriever",), "lucene": ("LuceneRetriever",),
                "lucene_compat": ("java_class", "start_jvm")}
"""The public names of the backends with optional extras, by module, imported when first used."""

__getattr__, __dir__ = lazy_exports(__name__, LAZY_EXPORTS)

__all__ = [
    "Retriever",
    "RetrieverOptions",
    "LocalIndexRetriever",
    "IndexOptions",
    "BM25Retriever",
    "BM25_PARAMS",
    "build_index",
    "IndexSummary",
    "LuceneRetriever",
    "HybridRetriever",
    "DenseEncoder",
    "java_class",
    "start_jvm",
    "RETRIEVER_NAMES",
    "RETRIEVER_CONFIG_FILE",
    "retriever_class",
    "retriever_names",
    "register_retriever",
    "retriever_identity",
    "load_retriever",
    "load_retriever_from_pretrained",
    "pretrained_folder",
    "hf_ralm_cache_dir",
    "read_index_info",
    "read_corpus",
    "split_passages",
    "passage_rows",
    "passage_columns",
    "WORDS_PER_PASSAGE",
    "ANALYSIS",
    "analyze",
    "analyze_texts",
    "iter_analyzed",
    "words",
    "word_term",
    "read_forbidden_titles",
    "RetrievalDataset",
    "RetrievalFingerprint",
    "push_retrieval_dataset",
]
