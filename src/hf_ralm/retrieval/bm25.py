"""Embedded BM25 (no Java): bm25s with Lucene's scoring (k1=0.9, b=0.4) and Lucene's English analysis.

Text becomes terms as in the Lucene backend (Anserini's ``DefaultEnglishAnalyzer``), so that results agree with the
paper's pyserini retrieval (top-1 agreement with Lucene: docs/lucene.md): ``hf_ralm.retrieval.analysis`` cuts words at
Unicode word boundaries as Lucene's ``StandardTokenizer`` does (``20,000``, ``3.14`` and ``U.S`` stay whole), drops the
possessive ``'s``, lowercases, removes Lucene's 33 English stop words and applies Lucene's Porter stemmer. The index is
bm25s's score matrix of these terms; the search is ``hf_ralm.retrieval.bm25_stream``'s (exact float64 sums, ties by
passage id, each query's scores updated from the last query of its text).

An index folder holds the bm25s matrices (memory-mapped when loaded), the passages as an Arrow table (memory-mapped by
``datasets``) and ``hf_ralm_index.json``, which records the corpus fingerprint so a folder is reused only for the corpus
it was built from, and the text analysis (``ANALYSIS``), so an index built with another one is refused (and rebuilt when
the corpus is given).

Examples:
    ```python
    retriever = BM25Retriever.build_or_load("articles.jsonl.gz", "index/")
    retriever = BM25Retriever.load("index/", forbidden_titles={"Nero"})
    retriever.retrieve(["the emperor of Rome"], k=2)[0][0].title   # 'Augustus'
    ```
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..core.passages import Passage
from ..config.passage_template import passage_text
from ..utils.checks import check_count
from ..utils.cpus import available_cpus
from ..utils.datasets_io import DATASET_SHARD, finish_saved_dataset
from .analysis import ANALYSIS, TermCache, analyze_texts, iter_analyzed
from .base import checked_queries, passages_from_table
from .bm25_index import MEMORY_BUDGET, count_terms, save_bm25s
from .corpus import PASSAGE_COLUMNS, check_passage_count
from .index_folder import check_index, reading_index
from .local import IndexOptions, LocalIndexRetriever

BM25_PARAMS = {"method": "lucene", "k1": 0.9, "b": 0.4}
"""bm25s' scoring settings of every index: Lucene's BM25 with pyserini's defaults, as the paper used."""
# what an index records and must match to be used: an index is used only with the analysis it was built with, since
# queries must be analyzed as the passages were
INDEX_SETTINGS = {**BM25_PARAMS, **ANALYSIS}
QUERY_TERM_CACHE = 100_000
"""Distinct query words whose terms a retriever remembers (``TermCache``, in ``hf_ralm.retrieval.analysis``, cleared
when full): a RALM text's queries repeat most of their words, so each is stemmed once."""
BM25_FILES = ("bm25s/params.index.json", "bm25s/vocab.index.json", "bm25s/data.csc.index.npy",
              "bm25s/indices.csc.index.npy", "bm25s/indptr.csc.index.npy", "passages/state.json", "passages/*.arrow")
"""The files of an index folder (beside hf_ralm_index.json), checked when the index records no file sizes."""


@dataclass(frozen=True)
class BM25Options(IndexOptions):
    """The bm25 backend's options (beside those of every local index).

    Attributes:
        n_threads: the threads of a batch of queries' search and the processes that analyse the passages of a build
            (``None``: the CPUs this process may use, ``available_cpus`` in ``hf_ralm.utils.cpus``).
        memory_budget: the bytes of score-matrix postings a build holds at once (``MEMORY_BUDGET`` of
            ``hf_ralm.retrieval.bm25_index``: 2 GiB), which does not change the index.
    """

    n_threads: int | None = None
    memory_budget: int = MEMORY_BUDGET

    def __post_init__(self):
        super().__post_init__()
        check_count("memory_budget", self.memory_budget)


class BM25Retriever(LocalIndexRetriever):
    """BM25 over 100-word passages, with optional exclusion of passages by article title (contamination).

    Opened from its options with [`from_options`][hf_ralm.retrieval.Retriever.from_options] (``retriever="bm25"``),
    which builds the index from ``corpus`` when it is missing or stale; the constructor opens a built index.

    Args:
        index_dir: the index folder, checked to hold a whole bm25 index before it is opened.
        forbidden_titles: the article titles whose passages are never returned.
        n_threads: the threads of a batch of queries' search (``None``: the CPUs this process may use).
    """

    name = "bm25"
    Options = BM25Options
    index_files = BM25_FILES
    index_settings = INDEX_SETTINGS

    def __init__(self, index_dir: str, forbidden_titles: Iterable[str] = (), n_threads: int | None = None):
        import bm25s
        from datasets import load_from_disk

        from .bm25_stream import BM25Stream  # numba: imported with the first bm25 index

        info = check_index(index_dir, self.name, BM25_FILES, settings=INDEX_SETTINGS)
        self.index_dir = index_dir
        self.info = info
        self.n_threads = n_threads or available_cpus()  # threads of a batch of queries' search
        with reading_index(index_dir, self.name):
            self.bm25 = bm25s.BM25.load(os.path.join(index_dir, "bm25s"), mmap=True, show_progress=False)
            self.passages = load_from_disk(os.path.join(index_dir, "passages"))
        self.forbidden_titles = frozenset(forbidden_titles)
        self._weight_mask = self._mask_titles(self.forbidden_titles)
        matrix = self.bm25.scores
        forbidden = None if self._weight_mask is None else np.flatnonzero(self._weight_mask == 0)
        # the search keeps its streams' scores between calls: a query continues from the last one of its text
        self._stream = BM25Stream(matrix["data"], matrix["indices"], matrix["indptr"], matrix["num_docs"],
                                  forbidden=forbidden, n_threads=self.n_threads)

    def _mask_titles(self, titles: frozenset[str]) -> np.ndarray | None:
        """1 per passage, 0 for a forbidden title's (bm25s's ``weight_mask``); ``None`` when nothing is forbidden."""
        if not titles:
            return None
        all_titles = self.passages.data.column("title").to_pylist()
        return np.fromiter((title not in titles for title in all_titles), dtype=np.float32, count=len(all_titles))

    @classmethod
    def load(cls, index_dir: str, forbidden_titles: Iterable[str] = (), n_threads: int | None = None
             ) -> "BM25Retriever":
        """The retriever over the bm25 index in ``index_dir``, built before (as the constructor: nothing is built here).

        Args:
            index_dir: the index folder.
            forbidden_titles: the article titles whose passages are never returned.
            n_threads: the threads of a batch of queries' search (``None``: the CPUs this process may use).

        Returns:
            The retriever.
        """
        return cls(index_dir, forbidden_titles=forbidden_titles, n_threads=n_threads)

    @classmethod
    def _write_index(cls, tmp_dir: str, passages: Iterator[dict], paths: Sequence[str] | None,
                     options: BM25Options, show_progress: bool) -> tuple[int, dict]:
        """The passages stream through once (``hf_ralm.retrieval.bm25_index``): each is written to the passages table
        and its terms counted into files of the build folder, and nothing more of its text is kept; the score matrix is
        then written from those files a range of terms at a time (``memory_budget``), so memory grows with the
        vocabulary, not with the corpus. With ``n_threads`` > 1 (default: the CPUs this process may use), that many
        worker processes analyse the passages a batch at a time while this one reads, writes and counts them in corpus
        order (``iter_analyzed``): the same index, sooner."""
        from datasets import Features, Value
        from datasets.arrow_writer import ArrowWriter

        os.makedirs(os.path.join(tmp_dir, "passages"))
        table = os.path.join(tmp_dir, "passages", DATASET_SHARD)  # written in place: its folder is then finished
        features = Features({name: Value("string") for name in PASSAGE_COLUMNS})
        with ArrowWriter(features=features, path=table) as writer:
            def texts() -> Iterator[str]:  # each passage goes to the table on its way to the analysis
                for row in passages:
                    writer.write({name: row[name] for name in PASSAGE_COLUMNS})
                    yield passage_text(row["title"], row["text"])

            counts = count_terms(iter_analyzed(texts(), processes=options.n_threads or available_cpus()),
                                 os.path.join(tmp_dir, "term-counts"))
            writer.finalize()
        check_passage_count(counts.num_docs, paths)
        save_bm25s(os.path.join(tmp_dir, "bm25s"), counts, BM25_PARAMS, options.memory_budget)
        num_passages = counts.num_docs
        counts.remove()
        del counts
        finish_saved_dataset(os.path.join(tmp_dir, "passages"))
        return num_passages, INDEX_SETTINGS

    @classmethod
    def _load(cls, index_dir: str, options: BM25Options) -> "BM25Retriever":
        return cls(index_dir, options.forbidden_titles, options.n_threads)

    def __len__(self) -> int:
        return len(self.passages)

    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """Top-``k`` passages per query, best first, ties by passage id; passages with a zero score (no query term
        matched) and forbidden titles are never returned. A passage's score is the float64 sum of its stored term scores
        over the query's analysed terms, each as often as it occurs in the query (``BM25Stream``, in
        ``hf_ralm.retrieval.bm25_stream``: exact, and updated from the last query of a text).

        Args:
            queries: the query texts.
            k: the passages per query.

        Returns:
            Per query, its passages (fewer than ``k`` when fewer match).
        """
        queries = checked_queries(queries, k)
        if not queries:
            return []
        ids, scores, counts = self._stream.search(self._term_counts(queries), k)
        hits = [list(zip(row_ids[:n].tolist(), row_scores[:n].tolist())) for row_ids, row_scores, n in
                zip(ids, scores, counts.tolist())]
        return passages_from_table(self.passages, hits)

    def _term_counts(self, queries: Sequence[str]) -> list[dict[int, int]]:
        """Per query, ``{term id: times it occurs}`` of its analysed terms found in the index (the words' terms
        remembered between calls)."""
        vocab, analyze = self.bm25.vocab_dict, self._query_terms.analyze
        return [dict(Counter(vocab[term] for term in analyze(query) if term in vocab)) for query in queries]

    @cached_property
    def _query_terms(self) -> TermCache:
        return TermCache(QUERY_TERM_CACHE)

    def passages_by_id(self, ids: Sequence[str]) -> list[Passage]:
        return passages_from_table(self.passages, [[(int(i), 0.0) for i in ids]])[0]

    def max_scores(self, queries: Sequence[str]) -> list[float]:
        """Per query, its maximum attainable BM25 score: with Lucene's scoring a term adds
        ``idf · tf / (tf + k1 · (1 - b + b · dl / avgdl))``, always below
        ``idf = log(1 + (N - df + 0.5) / (df + 0.5))``, so the bound is the sum of the idf of the query's analysed terms
        found in the index (each time a term occurs in the query, as scoring counts it).

        Args:
            queries: the query texts.

        Returns:
            Per query, its bound; 0 when none of its terms is found (nothing can be retrieved then).
        """
        queries = checked_queries(queries)
        matrix = self.bm25.scores  # one column per term: indptr[t + 1] - indptr[t] passages hold term t
        num_docs = matrix["num_docs"]
        bounds = []
        for tokens in analyze_texts(queries):
            term_ids = np.asarray(self.bm25.get_tokens_ids(tokens), dtype=np.int64)
            df = matrix["indptr"][term_ids + 1] - matrix["indptr"][term_ids]
            bounds.append(float(np.log1p((num_docs - df + 0.5) / (df + 0.5)).sum()))
        return bounds
