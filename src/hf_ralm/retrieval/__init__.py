"""Retrievers: the :class:`Retriever` contract (its options, its identity), the build-or-load of the backends with a
local index (:class:`LocalIndexRetriever`), the registry of backends (``bm25``, ``lucene``, ``dense``, ``hybrid``, and
those added with :func:`register_retriever`), loading and saving, corpus tools, retrieval files and retrieval
datasets."""

from .base import RETRIEVER_CONFIG_FILE, Retriever, RetrieverOptions, read_forbidden_titles, retriever_identity
from .bm25 import BM25Retriever
from .dataset import RetrievalDataset, RetrievalFingerprint, push_retrieval_dataset
from .factory import load_retriever, load_retriever_from_pretrained, pretrained_folder
from .index_folder import hf_ralm_cache_dir
from .local import IndexOptions, LocalIndexRetriever
from .registry import RETRIEVER_NAMES, register_retriever, retriever_class, retriever_names

__all__ = [
    "Retriever",
    "RetrieverOptions",
    "LocalIndexRetriever",
    "IndexOptions",
    "BM25Retriever",
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
    "read_forbidden_titles",
    "RetrievalDataset",
    "RetrievalFingerprint",
    "push_retrieval_dataset",
]
