"""Retrievers: the :class:`Retriever` base class, the registry of backends (``bm25``, ``lucene``, ``dense``,
``hybrid``), loading and saving, corpus tools, retrieval files and retrieval datasets."""

from .base import RETRIEVER_CONFIG_FILE, Retriever, read_forbidden_titles
from .bm25 import BM25Retriever
from .dataset import RetrievalDataset, RetrievalFingerprint, push_retrieval_dataset
from .factory import load_retriever, load_retriever_from_pretrained, pretrained_folder
from .index_folder import hf_ralm_cache_dir
from .registry import RETRIEVER_NAMES, retriever_class

__all__ = [
    "Retriever",
    "BM25Retriever",
    "RETRIEVER_NAMES",
    "RETRIEVER_CONFIG_FILE",
    "retriever_class",
    "load_retriever",
    "load_retriever_from_pretrained",
    "pretrained_folder",
    "hf_ralm_cache_dir",
    "read_forbidden_titles",
    "RetrievalDataset",
    "RetrievalFingerprint",
    "push_retrieval_dataset",
]
