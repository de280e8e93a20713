"""Retrievers: a small protocol (:class:`Retriever`), backends, corpus tools and retrieval files."""

from .base import Passage, Retriever, passage_text, read_forbidden_titles
from .bm25 import BM25Retriever
from .factory import load_retriever

__all__ = ["Passage", "Retriever", "BM25Retriever", "load_retriever", "passage_text", "read_forbidden_titles"]
