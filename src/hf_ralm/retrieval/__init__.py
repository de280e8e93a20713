"""Retrievers: the [`Retriever`][hf_ralm.retrieval.Retriever] contract (its options, its identity), the build-or-load of
the backends with a local index (``LocalIndexRetriever``), the registry of backends (``bm25``, ``lucene``, ``dense``,
``hybrid``, and those added with [`register_retriever`][hf_ralm.retrieval.register_retriever]), loading and saving,
corpus tools, retrieval files and retrieval datasets. Every name is imported from its module when first used
(``LAZY_EXPORTS``), as the registry imports the backends: the ones that need optional extras (``lucene``, ``dense``,
``hybrid``) only then, and nothing here imports torch or transformers before a name that needs them is asked for
(``hf-ralm --help``).

Examples:
    >>> from hf_ralm.retrieval import analyze, split_passages
    >>> [p["text"] for p in split_passages([{"id": "7", "title": "Rome", "text": "a b c d e"}], words_per_passage=2)]
    ['a b', 'c d', 'e']
    >>> analyze("The Emperor's armies")
    ['emperor', 'armi']
"""

from typing import TYPE_CHECKING

from ..utils.lazy import lazy_exports

LAZY_EXPORTS = {
    "analysis": ("ANALYSIS", "analyze", "analyze_texts", "iter_analyzed", "word_term", "words"),
    "base": ("RETRIEVER_CONFIG_FILE", "Retriever", "RetrieverOptions", "read_forbidden_titles", "retriever_identity"),
    "bm25": ("BM25_PARAMS", "BM25Retriever"),
    "building": ("build_index",),
    "corpus": ("WORDS_PER_PASSAGE", "passage_columns", "passage_rows", "read_corpus", "split_passages"),
    "dataset": ("RetrievalDataset", "RetrievalFingerprint", "push_retrieval_dataset"),
    "dense": ("DenseEncoder",),
    "factory": ("load_retriever", "load_retriever_from_pretrained", "pretrained_folder"),
    "hybrid": ("HybridRetriever",),
    "index_folder": ("hf_ralm_cache_dir", "read_index_info", "verify_index"),
    "declarations": ("RetrieverDeclaration", "index_flag"),
    "local": ("IndexOptions", "IndexSummary", "LocalIndexRetriever"),
    "lucene": ("LuceneRetriever",),
    "lucene_compat": ("java_class", "start_jvm"),
    "registry": ("RETRIEVER_NAMES", "register_retriever", "retriever_class", "retriever_declaration",
                 "retriever_names"),
}
"""The public names, by the module that defines them: each imported when first used, so that importing one module of
the package (the registry's names, the corpus's passage length) imports only what that module needs."""

if TYPE_CHECKING:  # what type checkers and the API reference read; at run time, LAZY_EXPORTS
    from .analysis import ANALYSIS, analyze, analyze_texts, iter_analyzed, word_term, words
    from .base import RETRIEVER_CONFIG_FILE, Retriever, RetrieverOptions, read_forbidden_titles, retriever_identity
    from .bm25 import BM25_PARAMS, BM25Retriever
    from .building import build_index
    from .corpus import WORDS_PER_PASSAGE, passage_columns, passage_rows, read_corpus, split_passages
    from .dataset import RetrievalDataset, RetrievalFingerprint, push_retrieval_dataset
    from .dense import DenseEncoder
    from .factory import load_retriever, load_retriever_from_pretrained, pretrained_folder
    from .hybrid import HybridRetriever
    from .index_folder import hf_ralm_cache_dir, read_index_info, verify_index
    from .declarations import RetrieverDeclaration, index_flag
    from .local import IndexOptions, IndexSummary, LocalIndexRetriever
    from .lucene import LuceneRetriever
    from .lucene_compat import java_class, start_jvm
    from .registry import RETRIEVER_NAMES, register_retriever, retriever_class, retriever_declaration, retriever_names

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
    "retriever_declaration",
    "RetrieverDeclaration",
    "index_flag",
    "retriever_identity",
    "load_retriever",
    "load_retriever_from_pretrained",
    "pretrained_folder",
    "hf_ralm_cache_dir",
    "read_index_info",
    "verify_index",
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
