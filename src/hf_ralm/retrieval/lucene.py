"""Lucene BM25 through pyserini/Anserini (extra ``[lucene]``): the paper's retriever, as ``retriever="lucene"``.

Three ways to open an index:

* build one from our corpus format (``LuceneRetriever.build(corpus, index_dir)``): every 100-word passage becomes a
  pyserini ``JsonCollection`` document ``{"id": row number, "contents": title + "\\n" + text, "title": title}``, indexed
  by Anserini's ``IndexCollection`` (Porter stemmer, Lucene's English stop words) in a child ``java`` process, with the
  raw JSON stored;
* open a local Lucene index folder (one built here, or any pyserini/Anserini index with stored ``raw`` JSON);
* name a pyserini prebuilt index (e.g. ``"wikipedia-dpr"``), which pyserini downloads into ``~/.cache/pyserini``
  (``$PYSERINI_CACHE``) the first time; offline, that is a clear ``ConnectionError``.

Which Java runs, how the in-process JVM starts (lazily, the first time an index is opened) and how Anserini is called
without importing ``pyserini.search.lucene`` is ``hf_ralm.retrieval.lucene_compat``'s business.

Examples:
    ```python
    retriever = LuceneRetriever.build_or_load("articles.jsonl.gz", "index-lucene/")
    retriever = LuceneRetriever.load("index-lucene/", forbidden_titles={"Nero"})
    retriever.retrieve(["the emperor of Rome"], k=2)[0][0].title   # 'Augustus'
    ```
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from transformers.utils import logging

from ..errors import setting
from ..core.passages import Passage
from ..config.passage_template import passage_text
from ..utils.cpus import available_cpus
from .base import RETRIEVER_CONFIG_FILE, checked_queries
from .corpus import check_passage_count
from .index_builds import copy_index
from .index_folder import check_index
from .index_manifest import INDEX_FILE
from .saved_paths import names_a_local_path, outside_folder_error, path_for_folder
from .local import IndexOptions, LocalIndexRetriever
from .lucene_compat import AnseriniSearcher, anserini_jar, find_java_home, java_command, prebuilt_index_path

logger = logging.get_logger(__name__)

LUCENE_SUBDIR = "lucene"  # the Lucene index inside an hf-ralm index folder (beside hf_ralm_index.json)
BM25_K1, BM25_B = 0.9, 0.4  # pyserini's defaults, as the paper used
LUCENE_FILES = (f"{LUCENE_SUBDIR}/segments_*",)  # checked when the index records no file sizes
DOCS_PER_FILE = 50_000  # Anserini indexes one collection file per thread: several files let all threads work


def _is_lucene_folder(path: str) -> bool:
    return os.path.isdir(path) and bool(glob.glob(os.path.join(path, "segments_*")))


def _passage_from_raw(docid: str, raw: str | None, contents: str | None, score: float) -> Passage:
    """A Passage from a stored document: our ``{"id", "contents", "title"}`` JSON, or pyserini's prebuilt format
    (``contents`` = ``"Title"\\ntext``, as in ``wikipedia-dpr``)."""
    doc = {}
    if raw:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = {"contents": raw}
    if not isinstance(doc, dict):
        doc = {"contents": raw}
    text = doc.get("contents", doc.get("text", contents or ""))
    title = doc.get("title")
    if title is None:  # prebuilt: first line is the title, in quotes for wikipedia-dpr
        head, sep, rest = text.partition("\n")
        if sep and len(head) < 300:
            title, text = head.strip().strip('"'), rest
        else:
            title = ""
    elif title and text.startswith(title + "\n"):
        text = text[len(title) + 1 :]
    return Passage(str(docid), title or "", text, float(score))


@dataclass(frozen=True)
class LuceneOptions(IndexOptions):
    """The lucene backend's options (beside those of every local index, whose ``index_dir`` may also name a pyserini
    prebuilt index).

    Attributes:
        n_threads: the threads of a batch of queries' search and of a build (``None``: the CPUs this process may use,
            ``available_cpus`` in ``hf_ralm.utils.cpus``).
        k1: BM25's ``k1`` (pyserini's default, as the paper used).
        b: BM25's ``b`` (pyserini's default, as the paper used).
    """

    n_threads: int | None = None
    k1: float = BM25_K1
    b: float = BM25_B


class LuceneRetriever(LocalIndexRetriever):
    """BM25 (Lucene, through Anserini) over 100-word passages, with optional exclusion of passages by article title.

    Opened from its options with [`from_options`][hf_ralm.retrieval.Retriever.from_options] (``retriever="lucene"``),
    which builds the index from ``corpus`` when it is missing or stale; the constructor opens an index.

    Args:
        index_dir: an hf-ralm Lucene index folder, any local Lucene index folder with stored ``raw`` documents, or a
            pyserini prebuilt index name such as ``"wikipedia-dpr"``.
        forbidden_titles: the article titles whose passages are never returned.
        n_threads: the threads of a batch of queries' search (``None``: the CPUs this process may use).
        k1: BM25's ``k1``.
        b: BM25's ``b``.

    Raises:
        FileNotFoundError: ``index_dir`` is neither a Lucene index folder nor a prebuilt index's name; the message says
            how to build one.
        ValueError: the index stores no document text (its passages would come back empty).
        ConnectionError: a prebuilt index not in pyserini's cache could not be downloaded.
    """

    name = "lucene"
    Options = LuceneOptions
    saved_path_options = {"index_dir": ("str",), "prebuilt": ("str",), **LocalIndexRetriever.saved_path_options}
    index_files = LUCENE_FILES

    def __init__(
        self,
        index_dir: str,
        forbidden_titles: Iterable[str] = (),
        n_threads: int | None = None,
        k1: float = BM25_K1,
        b: float = BM25_B,
    ):
        self.index_dir = index_dir
        self.prebuilt: str | None = None
        if os.path.isfile(os.path.join(index_dir, INDEX_FILE)):
            info = check_index(index_dir, self.name, LUCENE_FILES)
            lucene_dir = os.path.join(index_dir, LUCENE_SUBDIR)
        elif _is_lucene_folder(index_dir):
            lucene_dir, info = index_dir, {"retriever": self.name, "external": True}
        elif os.path.exists(index_dir) or os.sep in index_dir or (os.altsep and os.altsep in index_dir):
            raise FileNotFoundError(
                f"No Lucene index in {index_dir!r}. Build one with `hf-ralm index --retriever lucene --corpus FILE "
                f"--index-dir {index_dir}` or LuceneRetriever.build(corpus, index_dir)."
            )
        else:
            try:
                lucene_dir = prebuilt_index_path(index_dir)
            except KeyError:
                raise FileNotFoundError(
                    f"{index_dir!r} is neither a Lucene index folder nor a pyserini prebuilt index name (such as "
                    "'wikipedia-dpr'; see hf_ralm.retrieval.lucene_compat.prebuilt_index_names()). Build a local index "
                    f"with `hf-ralm index --retriever lucene --corpus FILE --index-dir {index_dir}`."
                ) from None
            self.prebuilt = index_dir
            info = {"retriever": self.name, "prebuilt": index_dir}
        self.info = info
        self.lucene_dir = lucene_dir
        self.n_threads = n_threads or available_cpus()  # threads of a batch of queries' search
        self.k1, self.b = float(k1), float(b)
        self.forbidden_titles = frozenset(forbidden_titles)
        self._searcher = AnseriniSearcher(lucene_dir, self.k1, self.b)
        self._num_docs = self._searcher.num_docs
        if not self._searcher.stores_text():
            raise ValueError(
                f"The Lucene index {index_dir!r} stores no document text (a -slim index, or one built without "
                "-storeRaw/-storeContents): its passages would come back empty. Use an index that stores the text "
                "(for the paper's corpus, the prebuilt 'wikipedia-dpr-100w'), or build one with `hf-ralm index "
                "--retriever lucene --corpus FILE`.")

    @classmethod
    def load(
        cls, index_dir: str, forbidden_titles: Iterable[str] = (), n_threads: int | None = None, k1: float = BM25_K1,
        b: float = BM25_B,
    ) -> "LuceneRetriever":
        """The retriever over the Lucene index ``index_dir`` (as the constructor: nothing is built here).

        Args:
            index_dir: an index folder or a pyserini prebuilt index's name.
            forbidden_titles: the article titles whose passages are never returned.
            n_threads: the threads of a batch of queries' search (``None``: the CPUs this process may use).
            k1: BM25's ``k1``.
            b: BM25's ``b``.

        Returns:
            The retriever.
        """
        return cls(index_dir, forbidden_titles=forbidden_titles, n_threads=n_threads, k1=k1, b=b)

    @classmethod
    def _write_index(cls, tmp_dir: str, passages: Iterator[dict], paths: Sequence[str] | None,
                     options: LuceneOptions, show_progress: bool) -> tuple[int, dict]:
        """Every passage becomes a pyserini ``JsonCollection`` document, indexed by Anserini's ``IndexCollection`` in
        a child ``java`` process (``n_threads`` threads), with the raw JSON stored."""
        collection = os.path.join(tmp_dir, "collection")
        os.makedirs(collection)
        num_passages = _write_collection(passages, collection)
        check_passage_count(num_passages, paths)
        java_home, source = find_java_home()
        threads = options.n_threads or available_cpus()
        command = [
            *java_command(java_home), "io.anserini.index.IndexCollection", "-collection", "JsonCollection",
            "-input", collection, "-index", os.path.join(tmp_dir, LUCENE_SUBDIR),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads), "-storeRaw",
            "-memoryBuffer", "512", "-optimize",
        ]
        if show_progress:
            logger.info("Indexing %d passages with Anserini (Java from %s: %s)...", num_passages, source, java_home)
        _run_indexer(command, show_progress)
        shutil.rmtree(collection)
        return num_passages, {
            "k1": options.k1,
            "b": options.b,
            "analyzer": "Anserini DefaultEnglishAnalyzer: StandardTokenizer, Porter stemmer, Lucene English stop "
                        "words",
            "anserini_jar": os.path.basename(anserini_jar()),
        }

    @classmethod
    def _load(cls, index_dir: str, options: LuceneOptions) -> "LuceneRetriever":
        return cls(index_dir, options.forbidden_titles, options.n_threads, options.k1, options.b)

    def __len__(self) -> int:
        return self._num_docs

    def _search(self, queries: Sequence[str], depth: int) -> list[list[Passage]]:
        """One threaded Anserini ``batch_search`` call: the top ``depth`` hits of every query."""
        found = self._searcher.batch_search(queries, depth, self.n_threads)
        return [[_passage_from_raw(*hit) for hit in hits] for hits in found]

    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """Top-``k`` passages per query, best first. Only passages matching a query term come back. With forbidden
        titles, the search goes ``max(100, 4k)`` deep (deeper again for queries still short of ``k`` allowed passages)
        so that ``k`` allowed passages come back whenever the index has them.

        Args:
            queries: the query texts.
            k: the passages per query.

        Returns:
            Per query, its passages.
        """
        queries = checked_queries(queries, k)
        if not queries:
            return []
        k = max(0, min(int(k), self._num_docs))
        if k == 0:
            return [[] for _ in queries]
        if not self.forbidden_titles:
            return self._search(queries, k)
        results: list[list[Passage] | None] = [None] * len(queries)
        pending = list(range(len(queries)))
        depth = min(max(100, 4 * k), self._num_docs)
        while pending:
            rows = self._search([queries[i] for i in pending], depth)
            still = []
            for i, row in zip(pending, rows):
                allowed = [p for p in row if p.title not in self.forbidden_titles]
                if len(allowed) >= k or len(row) < depth or depth >= self._num_docs:
                    results[i] = allowed[:k]
                else:
                    still.append(i)
            pending, depth = still, min(depth * 4, self._num_docs)
        return results  # type: ignore[return-value]

    def config(self) -> dict:
        """What [`from_config`][hf_ralm.retrieval.lucene.LuceneRetriever.from_config] rebuilds this retriever from: the
        index folder, or the prebuilt index's name (``"prebuilt"``), and the BM25 parameters."""
        if self.prebuilt:
            where = {"prebuilt": self.prebuilt}
        else:
            where = {"index_dir": os.path.abspath(self.index_dir)}
        return {"type": self.name, **where, "forbidden_titles": sorted(self.forbidden_titles), "k1": self.k1,
                "b": self.b}

    @classmethod
    def from_config(cls, config: dict, *, base_dir: str | None = None, config_file: str = RETRIEVER_CONFIG_FILE,
                    **overrides) -> "LuceneRetriever":
        """As [`Retriever.from_config`][hf_ralm.retrieval.Retriever.from_config]; a prebuilt index is recorded by name
        (``{"prebuilt": "wikipedia-dpr"}``), which is no path relative to ``base_dir``.

        Args:
            config: the description (``type`` and options).
            base_dir: the folder the config was read from (``None``: a description the caller gives).
            config_file: the config's file in ``base_dir``, for messages.
            **overrides: replace saved values (``None`` keeps the saved value).

        Returns:
            The retriever.

        Raises:
            SavedFolderError: a saved folder's prebuilt "name" would open a local folder (a path), and no ``index_dir``
                is given.
        """
        if "prebuilt" in config:
            name = config["prebuilt"]
            if base_dir is not None and overrides.get("index_dir") is None and names_a_local_path(name):
                raise outside_folder_error(base_dir, config_file, "prebuilt", name,
                                           "a prebuilt index is named as pyserini names it (such as 'wikipedia-dpr'); "
                                           f"give a local index folder yourself ({setting('index_dir')}=...).")
            config = {**{k: v for k, v in config.items() if k != "prebuilt"}, "index_dir": name}
            base_dir = None
        return super().from_config(config, base_dir=base_dir, config_file=config_file, **overrides)

    def _saved_config(self, save_directory: str, index_copy: str | None) -> dict:
        """A prebuilt index is saved by name; copied (``save_index=True``), its Lucene folder becomes a local index."""
        if not self.prebuilt:
            return super()._saved_config(save_directory, index_copy)
        if index_copy is None:
            return self.config()
        copied = copy_index(self.lucene_dir, os.path.join(save_directory, index_copy))
        config = {key: value for key, value in self.config().items() if key != "prebuilt"}
        return {**config, "index_dir": path_for_folder(copied, save_directory)}


def _run_indexer(command: list[str], show_progress: bool) -> None:
    """Run Anserini's IndexCollection, logging its log lines (info; not the JVM's warnings) when
    ``show_progress``."""
    from collections import deque

    tail: deque[str] = deque(maxlen=40)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        for line in process.stdout:
            tail.append(line.rstrip())
            if show_progress and not line.startswith("WARNING"):
                logger.info("%s", line.rstrip())
    if process.returncode != 0:
        raise RuntimeError(f"Anserini IndexCollection failed (exit {process.returncode}):\n" + "\n".join(tail))


def _write_collection(passages: Iterable[dict], folder: str) -> int:
    """Write passages as pyserini JsonCollection files (``DOCS_PER_FILE`` documents each); return their number (the
    corpus's reading shows the progress)."""
    count, f = 0, None
    try:
        for row in passages:
            if count % DOCS_PER_FILE == 0:
                if f is not None:
                    f.close()
                f = open(os.path.join(folder, f"docs{count // DOCS_PER_FILE:05d}.jsonl"), "w", encoding="utf-8")
            title = row.get("title") or ""
            doc = {"id": str(count), "contents": passage_text(title, row["text"]), "title": title}
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
            count += 1
    finally:
        if f is not None:
            f.close()
    return count
