"""Whether an index folder holds a usable index, and which of its files hf-ralm wrote: the checks every retrieval
backend (``bm25``, ``lucene``, ``dense``; ``hybrid``'s two sides) runs before it opens or rebuilds an index.

A manifest alone (``hf_ralm.retrieval.index_manifest``) does not make a folder hf-ralm's: it must be valid and every
file it lists must be there, with the size it records (for an index built before sizes were recorded: the backend's own
files must be there, and hf-ralm wrote the entries that hold them): ``folder_contents``, the one place that decides
which files a build may remove (``hf_ralm.retrieval.index_builds``).

Before an index is used, ``index_problem`` checks that it is whole (every recorded file there, with its size; for an
index built before sizes were recorded, the backend's own files), that each file holds what was written there (its
digest, when the file may have changed since it was last verified; [`verify_index`][hf_ralm.retrieval.verify_index]
hashes every file), that it is the backend's and that it records what this version reads. An index that fails is refused
with the command that rebuilds it (``check_index``), or rebuilt when the corpus is given (``reusable_index_info``, in
``hf_ralm.retrieval.index_builds``); another backend's index is never built over.

The files of hf-ralm's cache that belong to an index folder (its build lock, the stamps of its verified files) are named
here (``cache_file``, in ``hf_ralm_cache_dir``).

Examples:
    ```python
    check_index("wiki-bm25", "bm25")["num_passages"]   # 666157
    verify_index("wiki-bm25")   # {'index_dir': 'wiki-bm25', 'checksum': 'sha256', 'files': 8, 'bytes': 1630284}
    ```
"""

from __future__ import annotations

import glob
import hashlib
import os
from contextlib import contextmanager
from typing import Iterator, NamedTuple, Sequence

from transformers.utils import logging

from ..errors import IndexFolderError
from .index_checks import DIGEST_KEY, verify_files
from .index_manifest import INDEX_FILE, Manifest, read_manifest
from .saved_paths import leads_outside

logger = logging.get_logger(__name__)


def read_index_info(index_dir: str) -> dict | None:
    """The ``hf_ralm_index.json`` of an index folder.

    Args:
        index_dir: the index folder.

    Returns:
        Its ``hf_ralm_index.json``, or ``None`` if the folder holds no finished index.

    Raises:
        IndexFolderError: the ``hf_ralm_index.json`` is unreadable or invalid (``read_manifest``); the message names it.
    """
    info, problem = read_manifest(index_dir)
    if problem is not None:
        raise IndexFolderError(f"The index in {index_dir!r} {problem} ({os.path.join(index_dir, INDEX_FILE)}). "
                               f"Rebuild it: {rebuild_hint(index_dir, 'NAME')}.")
    return info


def rebuild_hint(index_dir: str, retriever: str) -> str:
    """How to (re)build the index of ``index_dir``: the ``hf-ralm index`` command (with the corpus files its
    ``hf_ralm_index.json`` records, else ``FILE``), or the corpus passed where the index is used, which rebuilds it
    there; once the user has deleted the folder when it holds an ``hf_ralm_index.json`` that does not make it hf-ralm's
    (a damaged or incomplete index: ``folder_contents``), which hf-ralm does not remove itself."""
    info, _ = read_manifest(index_dir) if os.path.isdir(index_dir) else Manifest(None, None)
    corpus = " ".join(f"--corpus {path}" for path in (info or {}).get("corpus") or ["FILE"])
    hint = (f"`hf-ralm index --retriever {retriever} {corpus} --index-dir {index_dir}`, or pass the corpus where the "
            "index is used (--corpus, corpus=), which rebuilds it there")
    if os.path.isdir(index_dir) and folder_contents(index_dir).problem is not None:
        hint += (f", once you have deleted {index_dir!r} (hf-ralm removes only an index whose files are all there as "
                 "it wrote them)")
    return hint


def _files_under(folder: str, prefix: str = "") -> list[str]:
    """Every entry under ``folder`` that is no folder (files, links), by path relative to it (``/``-separated, after
    ``prefix``)."""
    found = []
    for root, dirs, names in os.walk(folder):
        links = [name for name in dirs if os.path.islink(os.path.join(root, name))]  # not walked into: entries
        for name in [*names, *links]:
            relative = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            found.append(prefix + relative)
    return found


def file_sizes(folder: str) -> dict[str, int]:
    """The size of every file under ``folder``, by path relative to it (``/``-separated)."""
    return {name: os.path.getsize(os.path.join(folder, name)) for name in _files_under(folder)}


def _written_files(index_dir: str, info: dict, files: Sequence[str]) -> tuple[list[str] | None, str | None]:
    """``(written, problem)``: the files the valid ``hf_ralm_index.json`` ``info`` of ``index_dir`` says hf-ralm wrote
    there, when they are: every file it lists, there with the size it records; for an index built before sizes were
    recorded, every file under the entries that hold the backend's own ``files`` (glob patterns), when each pattern
    finds one. Otherwise ``(None, problem)``, as ``index_problem`` words it."""
    recorded = info.get("files")
    if recorded is None:
        missing = [pattern for pattern in files if not glob.glob(os.path.join(index_dir, pattern))]
        if missing:
            return None, f"is incomplete: {missing[0]} is missing"
        entries = sorted({os.path.basename(path) for pattern in files
                          for path in glob.glob(os.path.join(index_dir, pattern.split("/")[0]))})
        written = []
        for entry in entries:  # the backend's own entries: its files, and the folders its files lie in, whole
            path = os.path.join(index_dir, entry)
            written += _files_under(path, entry + "/") if os.path.isdir(path) and not os.path.islink(path) else [entry]
        return written, None
    for name, size in recorded.items():
        if leads_outside(name, index_dir, follow_last=False):  # a Hub download's files are links to its blobs
            return None, f"is damaged: its {INDEX_FILE} lists {name!r}, which leads outside the folder"
        path = os.path.join(index_dir, name)
        if not os.path.isfile(path):
            return None, f"is incomplete: {name} is missing"
        if os.path.getsize(path) != size:
            return None, f"is truncated or damaged: {name} holds {os.path.getsize(path)} bytes, {size} were written"
    return list(recorded), None


def _backend_files(retriever) -> tuple[str, ...]:
    """The ``index_files`` (glob patterns) of the backend ``retriever`` names, ``()`` for none that is here."""
    from .registry import retriever_class

    try:
        return tuple(getattr(retriever_class(retriever), "index_files", ())) if isinstance(retriever, str) else ()
    except (ValueError, ImportError):  # an unknown name, a backend whose packages are missing
        return ()


class FolderContents(NamedTuple):
    """What an existing index folder holds, as ``folder_contents`` sorts it."""

    written: tuple[str, ...]
    """The files hf-ralm wrote there, which a build may remove (``hf_ralm_index.json`` last); ``()`` when the folder
    is no hf-ralm index."""
    others: tuple[str, ...]
    """The entries hf-ralm did not write (top-level names; paths inside a folder of the index's): every entry of a
    folder that is no hf-ralm index."""
    problem: str | None
    """Why the ``hf_ralm_index.json`` there does not make the folder hf-ralm's (``index_problem``'s words), or
    ``None``."""


def folder_contents(index_dir: str) -> FolderContents:
    """Which entries of the existing folder ``index_dir`` hf-ralm wrote (and a build may remove) and which it did not:
    the one place that decides it. The folder is an hf-ralm index only when its ``hf_ralm_index.json`` is valid
    (``read_manifest``) and every file it lists is there with its recorded size (``_written_files``; an older index's:
    the files of its backend's own entries); then hf-ralm wrote those files and the ``hf_ralm_index.json``, and nothing
    else (a folder inside the index that holds none of them is not the index's either).

    Args:
        index_dir: an existing folder.

    Returns:
        Its ``FolderContents``.

    Examples:
        ```python
        folder_contents("wiki-bm25")
        # FolderContents(written=('bm25s/params.index.json', ..., 'hf_ralm_index.json'), others=('notes.txt',),
        #                problem=None)
        ```
    """
    names = sorted(os.listdir(index_dir))
    info, problem = read_manifest(index_dir)
    written = None
    if info is not None:
        files = () if "files" in info else _backend_files(info.get("retriever"))
        written, problem = _written_files(index_dir, info, files)
    if written is None:
        return FolderContents((), tuple(names), problem)
    written = sorted(set(written) - {INDEX_FILE}) + [INDEX_FILE]
    others = []
    for name in names:
        path = os.path.join(index_dir, name)
        if os.path.isdir(path) and not os.path.islink(path) and any(w.startswith(name + "/") for w in written):
            others += [entry for entry in _files_under(path, name + "/") if entry not in written]
        elif name not in written:
            others.append(name)
    return FolderContents(tuple(written), tuple(others), None)


def index_problem(index_dir: str, retriever: str, files: Sequence[str] = (), keys: Sequence[str] = (),
                  settings: dict | None = None, *, trust_stamps: bool = True) -> str | None:
    """Why the folder ``index_dir`` holds no usable finished index of ``retriever``, or ``None`` when it does.

    Checked before anything is loaded (whose index it is, ``check_kind``, first): the folder and its
    ``hf_ralm_index.json`` exist and are valid (``read_manifest``), it records ``retriever``, ``keys`` and ``settings``
    (an index built by an older hf-ralm may not), with the values of ``settings``, and its files are all there: each
    with the size recorded when it was built (a copy that stopped short, a disk that filled up) or, for an index built
    before sizes were recorded, the backend's own ``files``; and each holds what was written there, by the checksum
    recorded when it was built (``_content_problem``).

    Args:
        index_dir: the index folder.
        retriever: the backend's name.
        files: the backend's own files (glob patterns relative to the folder).
        keys: what the index must record for the backend to open it.
        settings: the values the index must record (its scoring, its text analysis).
        trust_stamps: trust a file unchanged since it was last verified (else hash every file).

    Returns:
        The problem, worded to follow "the index" (``'is incomplete: ...'``), or ``None``.

    Examples:
        ```python
        index_problem("wiki-bm25", "bm25", ["bm25s/params.index.json"])
        # 'is incomplete: bm25s/data.csc.index.npy is missing'
        ```
    """
    if not os.path.isdir(index_dir):
        return "does not exist"
    info, problem = read_manifest(index_dir)
    if problem is not None:
        return problem
    if info is None:
        return f"holds no finished index (no {INDEX_FILE})"
    unrecorded = [key for key in ["retriever", *keys, *(settings or {})] if key not in info]
    if unrecorded:
        return f"was built by an older hf-ralm: its {INDEX_FILE} records no {', '.join(unrecorded)}"
    other = {key: info[key] for key, value in (settings or {}).items() if info[key] != value}
    if other:
        return f"was built with other settings ({other}, now {({key: settings[key] for key in other})})"
    return _written_files(index_dir, info, files)[1] or _content_problem(index_dir, retriever, info, trust_stamps)


_UNCHECKED_SAID: set[str] = set()
"""The index folders (real paths) that this process has said record no checksums: said once each."""


def _content_problem(index_dir: str, retriever: str, info: dict, trust_stamps: bool = True) -> str | None:
    """Why the files of the whole index in ``index_dir`` (its valid ``hf_ralm_index.json``, ``info``: every file it
    lists there with its size) do not hold what its build wrote, by the SHA-256 digests it recorded (``verify_files``,
    in ``hf_ralm.retrieval.index_checks``, its stamps in hf-ralm's cache: ``cache_file``), or ``None``. An index built
    before checksums were recorded is checked by its sizes only, which is said once (logged: warning), with how to
    rebuild it."""
    digests = info.get(DIGEST_KEY)
    if digests is None:
        if os.path.realpath(index_dir) not in _UNCHECKED_SAID:
            _UNCHECKED_SAID.add(os.path.realpath(index_dir))
            logger.warning("hf-ralm: the %s index in %s records no checksums of its files (built by an older "
                           "hf-ralm): only their sizes are checked before use, and `hf-ralm index --verify` cannot "
                           "check it; rebuilding it records them: %s.", retriever, index_dir,
                           rebuild_hint(index_dir, retriever))
        return None
    listed = {name: digests[name] for name in info.get("files") or {} if name in digests}
    damaged = verify_files(index_dir, listed, cache_file(index_dir, "index-checks", ".json"), trust_stamps)
    if not damaged:
        return None
    first, *others = damaged
    more = f"; nor do {', '.join(damage.name for damage in others)}" if others else ""
    return (f"is damaged: {first.path} does not hold what hf-ralm wrote there (its SHA-256 is {first.actual[:16]}..., "
            f"{first.recorded[:16]}... was recorded when the index was built){more}")


def check_kind(index_dir: str, retriever: str) -> None:
    """Refuse a folder that holds another backend's index: one index folder per retriever, and no build overwrites
    another backend's index.

    Args:
        index_dir: the index folder.
        retriever: the backend's name.

    Raises:
        IndexFolderError: ``index_dir`` holds another backend's index.
    """
    info = read_manifest(index_dir).info if os.path.isdir(index_dir) else None  # a damaged one: index_problem says
    kind = (info or {}).get("retriever", retriever)
    if kind != retriever:
        raise IndexFolderError(f"{index_dir!r} holds a {kind!r} index, not a {retriever} one: give each retriever its "
                               "own --index-dir.")


def check_index(index_dir: str, retriever: str, files: Sequence[str] = (), keys: Sequence[str] = (),
                settings: dict | None = None) -> dict:
    """The ``hf_ralm_index.json`` of the usable ``retriever`` index in ``index_dir`` (see ``index_problem``).

    Args:
        index_dir: the index folder.
        retriever: the backend's name.
        files: the backend's own files (glob patterns), checked in an index that records no file sizes.
        keys: what the index must record for the backend to open it.
        settings: the values the index must record (its scoring, its text analysis).

    Returns:
        The index's ``hf_ralm_index.json``.

    Raises:
        FileNotFoundError: the folder holds no finished index; the message says how to build one.
        IndexFolderError: the index cannot be used (damaged, older, another backend's, other settings); the message says
            what is wrong and how to rebuild it.
    """
    check_kind(index_dir, retriever)
    if not os.path.isfile(os.path.join(index_dir, INDEX_FILE)):
        raise FileNotFoundError(f"No hf-ralm {retriever} index in {index_dir!r} and no --corpus to build one from: "
                                f"build it with {rebuild_hint(index_dir, retriever)}.")
    problem = index_problem(index_dir, retriever, files, keys, settings)
    if problem is not None:
        raise _unusable(index_dir, retriever, problem)
    return read_index_info(index_dir)


def _unusable(index_dir: str, retriever: str, problem: str) -> IndexFolderError:
    """The error for the ``retriever`` index in ``index_dir`` that cannot be used (``problem``, as ``index_problem``
    words it), with how to rebuild it."""
    return IndexFolderError(f"The {retriever} index in {index_dir!r} {problem}. Rebuild it: "
                            f"{rebuild_hint(index_dir, retriever)}.")


def verify_index(index_dir: str, trust_stamps: bool = False) -> dict:
    """Check every file of the index in ``index_dir`` against the SHA-256 digest recorded when it was built, each one
    read whole: what ``hf-ralm index --verify DIR`` runs. A hybrid folder's two indexes are checked both. Verified files
    are stamped as such.

    Args:
        index_dir: the index folder.
        trust_stamps: trust a file unchanged since it was last verified (the check a load makes); by default no file is
            trusted.

    Returns:
        ``{"index_dir", "checksum": "sha256", "files", "bytes"}``: what was verified.

    Raises:
        FileNotFoundError: no such folder.
        IndexFolderError: a file is damaged (the message names it and says how to rebuild the index), missing or of
            another size; the index records no checksums (built by an older hf-ralm); the folder holds no index hf-ralm
            built (a Lucene index from elsewhere, a pyserini prebuilt index: they have no checksums).

    Examples:
        ```python
        from hf_ralm.retrieval import verify_index

        verify_index("wiki-bm25")   # {'index_dir': 'wiki-bm25', 'checksum': 'sha256', 'files': 8, 'bytes': 1630284}
        ```
    """
    if not os.path.isdir(index_dir):
        raise FileNotFoundError(f"No index folder {index_dir!r} to verify.")
    from .hybrid import SPARSE_NAMES

    info = read_index_info(index_dir)
    if info is None:
        sides = [name for name in (*SPARSE_NAMES, "dense") if os.path.isfile(os.path.join(index_dir, name, INDEX_FILE))]
        if not sides:
            raise IndexFolderError(f"{index_dir!r} holds no index hf-ralm built (no {INDEX_FILE}), so nothing records "
                                   "what its files should hold: only an index hf-ralm builds records checksums (a "
                                   "Lucene index built elsewhere or a pyserini prebuilt index has none).")
        checked = [verify_index(os.path.join(index_dir, name), trust_stamps) for name in sides]  # a hybrid's sides
        return {"index_dir": index_dir, "checksum": DIGEST_KEY, "files": sum(side["files"] for side in checked),
                "bytes": sum(side["bytes"] for side in checked)}
    retriever = info.get("retriever", "NAME")
    if DIGEST_KEY not in info:
        raise IndexFolderError(f"The {retriever} index in {index_dir!r} records no checksums of its files (built by "
                               "an older hf-ralm), so what they hold cannot be verified. Rebuild it to record them: "
                               f"{rebuild_hint(index_dir, retriever)}.")
    problem = index_problem(index_dir, retriever, _backend_files(retriever), trust_stamps=trust_stamps)
    if problem is not None:
        raise _unusable(index_dir, retriever, problem)
    verified = [name for name in info.get("files") or {} if name in info[DIGEST_KEY]]
    return {"index_dir": index_dir, "checksum": DIGEST_KEY, "files": len(verified),
            "bytes": sum(info["files"][name] for name in verified)}


@contextmanager
def reading_index(index_dir: str, retriever: str) -> Iterator[None]:
    """Report an error raised while a backend opens the files of a checked index (``check_index``: all there, of the
    right sizes, yet unreadable) as [`IndexFolderError`][hf_ralm.errors.IndexFolderError] saying how to rebuild it.

    Args:
        index_dir: the index folder.
        retriever: the backend's name.
    """
    try:
        yield
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise IndexFolderError(f"The {retriever} index in {index_dir!r} is damaged: its files cannot be read "
                               f"({type(error).__name__}: {error}). Rebuild it: "
                               f"{rebuild_hint(index_dir, retriever)}.") from error


def cache_file(index_dir: str, kind: str, suffix: str) -> str:
    """The file of hf-ralm's cache that belongs to the index folder ``index_dir``, whatever path names it:
    ``<cache>/<kind>/<name>-<hash of the folder's real path><suffix>`` (``hf_ralm_cache_dir``): its build lock
    (``building``, in ``hf_ralm.retrieval.index_builds``), the stamps of its verified files (``_content_problem``).

    Args:
        index_dir: the index folder.
        kind: the cache's sub-folder (``"locks"``, ``"index-checks"``).
        suffix: the file's extension.

    Returns:
        The file's path.
    """
    real = os.path.realpath(index_dir)
    key = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(hf_ralm_cache_dir(), kind, f"{os.path.basename(real)}-{key}{suffix}")


def hf_ralm_cache_dir() -> str:
    """hf-ralm's cache folder: ``$HF_HOME/hf-ralm`` when ``HF_HOME`` is set, else ``$XDG_CACHE_HOME/hf-ralm``, else
    ``~/.cache/hf-ralm``.

    Examples:
        ```python
        hf_ralm_cache_dir()   # '/home/me/.cache/hf-ralm'
        ```
    """
    for variable in ("HF_HOME", "XDG_CACHE_HOME"):
        if os.environ.get(variable):
            return os.path.join(os.environ[variable], "hf-ralm")
    return os.path.join(os.path.expanduser("~"), ".cache", "hf-ralm")
