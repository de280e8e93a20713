"""The index folder every retrieval backend (``bm25``, ``lucene``, ``dense``; ``hybrid``'s two sides) writes and
reuses.

A folder holds the backend's own files beside ``hf_ralm_index.json``, which records the retriever, the corpus files,
their fingerprint (:func:`~hf_ralm.retrieval.corpus.corpus_fingerprint`), the passage size, the number of passages,
the backend's settings and the size and SHA-256 digest of every file (:mod:`~hf_ralm.retrieval.index_checks`). A
build writes everything under ``<index_dir>.tmp`` and moves it to ``index_dir`` only when complete
(``hf_ralm_index.json`` last), so an interrupted build leaves no half-index behind, and builds of one folder take
turns (:func:`building`: the first builds, the others wait and then reuse its index).

What hf-ralm deletes, by name only: an index is built into a missing or empty folder, or over an hf-ralm index
(:func:`check_build_folder`), and a (re)build removes exactly the files that index's ``hf_ralm_index.json`` lists
as written by hf-ralm, the ``hf_ralm_index.json`` itself and the sub-folders those files leave empty
(:func:`folder_contents`), never the folder. A manifest alone does not make a folder hf-ralm's: it must be valid
(:func:`read_manifest`) and every file it lists must be there, with the size it records (for an index built before
sizes were recorded: the backend's own files must be there, and hf-ralm wrote the entries that hold them).
Any other entry (a user's notes, a corpus kept inside the folder, a folder a stray ``hf_ralm_index.json`` was copied
into) stops the build with one line naming it, and nothing is changed. A temporary build folder is emptied or
removed only when it holds :data:`BUILD_MARKER`, written when hf-ralm makes it (:func:`build_folder`).

Before an index is used, :func:`index_problem` checks that it is whole (every recorded file there, with its size; for
an index built before sizes were recorded, the backend's own files), that each file holds what was written there (its
digest, when the file may have changed since it was last verified; :func:`verify_index` hashes every file), that it
is the backend's and that it records what this version reads. An index that fails is rebuilt when the corpus is
given (:func:`reusable_index_info`, which logs a warning), if it is hf-ralm's by the rule above (one whose files are
missing or of other sizes is not: the user removes it; one whose files hold other bytes, at their sizes, is), and
otherwise refused with the command that rebuilds it (:func:`check_index`); another backend's index is never built
over.

Without a folder, an index goes to ``<cache>/indexes/<backend>-<corpus fingerprint[:16]>``
(:func:`default_index_dir`, ``<cache>`` from :func:`hf_ralm_cache_dir`). A retriever saved with ``save_pretrained``
records its index folder relative to the saved folder when it lies inside it (:func:`path_for_folder`), so that
folder can be moved or pushed to the Hub. A path read from a saved or downloaded folder is followed only inside it
(:func:`saved_path`; the list of files in ``hf_ralm_index.json`` too, :func:`index_problem`): a folder is no way to
make hf-ralm open, build or delete anything elsewhere. The one exception is read only: an index saved outside the
folder on this machine is opened there when it is still the index it was saved with (:func:`saved_index_dir`).

Example (what :class:`~hf_ralm.retrieval.local.LocalIndexRetriever`'s build does for every backend)::

    paths, articles = corpus_paths_and_articles(corpus)
    with new_build(index_dir) as tmp_dir:   # removed if the build fails or is interrupted
        ...  # write the backend's files into tmp_dir
        finish_build(tmp_dir, index_dir, "bm25", paths, words_per_passage, num_passages, settings)
"""

from __future__ import annotations

import glob
import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

from transformers.utils import logging

from ..errors import IndexFolderError, SavedFolderError
from ..runs.locks import file_lock
from ..utils.atomic import naming_full_disk
from ..utils.paths import looks_local
from ..utils.progress import Pace, format_duration
from .corpus import check_corpus_file, corpus_bytes, corpus_fingerprint, is_hub_corpus, read_corpora
from .index_checks import DIGEST_KEY, hash_files, stamp_moved, verify_files

logger = logging.get_logger(__name__)

INDEX_FILE = "hf_ralm_index.json"
BUILD_MARKER = ".hf_ralm_build"
"""The (empty) file in a temporary build folder, ``<index_dir>.tmp``, that says hf-ralm made that folder: only such a
folder is ever emptied or removed (a user's folder of that name is refused)."""


class Manifest(NamedTuple):
    """An index folder's ``hf_ralm_index.json`` as :func:`read_manifest` read it: ``info`` (``None`` when there is
    none or it is invalid) and ``problem``, why it is invalid (``None`` when it is not), as :func:`index_problem`
    words it ("is damaged: ...")."""

    info: dict | None
    problem: str | None


MANIFEST_SCHEMA: dict[str, tuple[tuple[type, ...], str]] = {
    "retriever": ((str,), "a retriever's name"),
    "corpus": ((list, type(None)), "a list of corpus files or null"),
    "fingerprint": ((str, type(None)), "a hash or null"),
    "words_per_passage": ((int,), "a whole number"),
    "num_passages": ((int,), "a whole number"),
    "files": ((dict,), "an object of file names and their sizes"),
    DIGEST_KEY: ((dict,), "an object of file names and their SHA-256 digests"),
}
"""The types of the keys of ``hf_ralm_index.json`` that hf-ralm itself reads (a backend's settings are checked by
what they must equal, :func:`index_problem`); a key may be missing (an older index), not of another type."""


def _schema_problem(info) -> str | None:
    """What makes the parsed ``hf_ralm_index.json`` ``info`` unusable, or ``None``: it is no JSON object, or a key
    that hf-ralm reads has another type (:data:`MANIFEST_SCHEMA`; ``corpus`` a list of paths, ``files`` an object of
    file names and sizes in bytes, ``sha256`` of file names and hex digests)."""
    if not isinstance(info, dict):
        return "is not a JSON object"
    for key, (types, wanted) in MANIFEST_SCHEMA.items():
        value = info.get(key)
        if key in info and (not isinstance(value, types) or isinstance(value, bool)):
            return f"records {key!r} as {json.dumps(value)[:40]}, not {wanted}"
    if any(not isinstance(path, str) for path in info.get("corpus") or []):
        return "records 'corpus' with an entry that is no path"
    for name, size in (info.get("files") or {}).items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return f"records the size of {name!r} as {json.dumps(size)[:40]}, not a number of bytes"
    for name, digest in (info.get(DIGEST_KEY) or {}).items():
        if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
            return f"records the SHA-256 digest of {name!r} as {json.dumps(digest)[:40]}, not 64 hex digits"
    return None


def read_manifest(index_dir: str) -> Manifest:
    """The ``hf_ralm_index.json`` of an index folder, checked (:func:`_schema_problem`) before anything reads it."""
    path = os.path.join(index_dir, INDEX_FILE)
    if not os.path.isfile(path):
        return Manifest(None, None)
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except ValueError:
        info = None
    problem = _schema_problem(info)
    return Manifest(None, f"is damaged: its {INDEX_FILE} {problem}") if problem else Manifest(info, None)


def read_index_info(index_dir: str) -> dict | None:
    """The ``hf_ralm_index.json`` of an index folder, or ``None`` if the folder holds no finished index; an unreadable
    or invalid one (:func:`read_manifest`) raises :class:`~hf_ralm.errors.IndexFolderError` naming it."""
    info, problem = read_manifest(index_dir)
    if problem is not None:
        raise IndexFolderError(f"The index in {index_dir!r} {problem} ({os.path.join(index_dir, INDEX_FILE)}). "
                               f"Rebuild it: {rebuild_hint(index_dir, 'NAME')}.")
    return info


def rebuild_hint(index_dir: str, retriever: str) -> str:
    """How to (re)build the index of ``index_dir``: the ``hf-ralm index`` command (with the corpus files its
    ``hf_ralm_index.json`` records, else ``FILE``), or the corpus passed where the index is used, which rebuilds it
    there; once the user has deleted the folder when it holds an ``hf_ralm_index.json`` that does not make it
    hf-ralm's (a damaged or incomplete index: :func:`folder_contents`), which hf-ralm does not remove itself."""
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


def _file_sizes(folder: str) -> dict[str, int]:
    """The size of every file under ``folder``, by path relative to it (``/``-separated)."""
    return {name: os.path.getsize(os.path.join(folder, name)) for name in _files_under(folder)}


def _written_files(index_dir: str, info: dict, files: Sequence[str]) -> tuple[list[str] | None, str | None]:
    """``(written, problem)``: the files the valid ``hf_ralm_index.json`` ``info`` of ``index_dir`` says hf-ralm wrote
    there, when they are: every file it lists, there with the size it records; for an index built before sizes were
    recorded, every file under the entries that hold the backend's own ``files`` (glob patterns), when each pattern
    finds one. Otherwise ``(None, problem)``, as :func:`index_problem` words it."""
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
    """What an existing index folder holds, as :func:`folder_contents` sorts it."""

    written: tuple[str, ...]
    """The files hf-ralm wrote there, which a build may remove (``hf_ralm_index.json`` last); ``()`` when the folder
    is no hf-ralm index."""
    others: tuple[str, ...]
    """The entries hf-ralm did not write (top-level names; paths inside a folder of the index's): every entry of a
    folder that is no hf-ralm index."""
    problem: str | None
    """Why the ``hf_ralm_index.json`` there does not make the folder hf-ralm's (:func:`index_problem`'s words), or
    ``None``."""


def folder_contents(index_dir: str) -> FolderContents:
    """Which entries of the existing folder ``index_dir`` hf-ralm wrote (and a build may remove) and which it did not:
    the one place that decides it. The folder is an hf-ralm index only when its ``hf_ralm_index.json`` is valid
    (:func:`read_manifest`) and every file it lists is there with its recorded size (:func:`_written_files`; an older
    index's: the files of its backend's own entries); then hf-ralm wrote those files and the ``hf_ralm_index.json``,
    and nothing else (a folder inside the index that holds none of them is not the index's either).

    Example::

        folder_contents("wiki-bm25")
        # FolderContents(written=('bm25s/params.index.json', ..., 'hf_ralm_index.json'), others=('notes.txt',),
        #                problem=None)
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
                  settings: dict | None = None, trust_stamps: bool = True) -> str | None:
    """Why the folder ``index_dir`` holds no usable finished index of ``retriever``, or ``None`` when it does.

    Checked before anything is loaded (whose index it is, :func:`check_kind`, first): the folder and its
    ``hf_ralm_index.json`` exist and are valid (:func:`read_manifest`), it records ``retriever``, ``keys`` and
    ``settings`` (an index built by an older hf-ralm may not), with the values of ``settings``, and its files are all
    there: each with the size recorded when it was built (a copy that stopped short, a disk that filled up) or, for an
    index built before sizes were recorded, the backend's own ``files`` (glob patterns relative to the folder); and
    each holds what was written there, by the checksum recorded when it was built (:func:`_content_problem`; a file
    unchanged since it was last verified is trusted when ``trust_stamps``).

    Example::

        index_problem("wiki-bm25", "bm25", ["bm25s/params.index.json"])
        # 'is incomplete: bm25s/data.csc.index.npy is missing'
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
    lists there with its size) do not hold what its build wrote, by the SHA-256 digests it recorded
    (:func:`~hf_ralm.retrieval.index_checks.verify_files`, its stamps in hf-ralm's cache: :func:`_cache_file`), or
    ``None``. An index built before checksums were recorded is checked by its sizes only, which is said once (logged:
    warning), with how to rebuild it."""
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
    damaged = verify_files(index_dir, listed, _cache_file(index_dir, "index-checks", ".json"), trust_stamps)
    if not damaged:
        return None
    first, *others = damaged
    more = f"; nor do {', '.join(damage.name for damage in others)}" if others else ""
    return (f"is damaged: {first.path} does not hold what hf-ralm wrote there (its SHA-256 is {first.actual[:16]}..., "
            f"{first.recorded[:16]}... was recorded when the index was built){more}")


def check_kind(index_dir: str, retriever: str) -> None:
    """Raise :class:`~hf_ralm.errors.IndexFolderError` when ``index_dir`` holds another backend's index: one index
    folder per retriever, and no build overwrites another backend's index."""
    info = read_manifest(index_dir).info if os.path.isdir(index_dir) else None  # a damaged one: index_problem says
    kind = (info or {}).get("retriever", retriever)
    if kind != retriever:
        raise IndexFolderError(f"{index_dir!r} holds a {kind!r} index, not a {retriever} one: give each retriever its "
                               "own --index-dir.")


def _is_build_folder(folder: str) -> bool:
    """Whether ``folder`` is a temporary build folder hf-ralm made (:data:`BUILD_MARKER`), which it may empty or
    remove."""
    return os.path.isfile(os.path.join(folder, BUILD_MARKER))


def _entries(names: Sequence[str]) -> str:
    """A few of a folder's entries and their number, for a message: ``'a.txt, b.txt, c, ... (12 entries)'``."""
    shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
    return f"{shown} ({len(names)} entr{'y' if len(names) == 1 else 'ies'})"


def check_build_folder(index_dir: str, retriever: str | None = None, parts: Sequence[str] = ()) -> tuple[str, ...]:
    """Raise :class:`~hf_ralm.errors.IndexFolderError` unless an index may be built into ``index_dir``: a missing or
    empty folder, or an hf-ralm index (of ``retriever`` when given: :func:`check_kind`) that holds nothing hf-ralm
    did not write (:func:`folder_contents`), or one that holds only ``parts`` (a hybrid folder: its sides' folders,
    which their own builds check). Anything else (a mistyped ``--index-dir`` naming the corpus's folder, the working
    folder, a user's file or a corpus put inside an index, a damaged or incomplete index) is refused, untouched.

    Returns:
        The files there that hf-ralm wrote, which the build replaces (:attr:`FolderContents.written`).

    Example::

        check_build_folder("data", "bm25")
        # IndexFolderError: 'data' is not an hf-ralm index folder and is not empty: it holds notes.txt, wiki.jsonl
        # (2 entries). ...
    """
    if retriever is not None:
        check_kind(index_dir, retriever)
    if not os.path.lexists(index_dir):
        return ()
    if not os.path.isdir(index_dir):
        raise IndexFolderError(f"{index_dir!r} is a file, not a folder: choose a new or empty --index-dir.")
    contents = folder_contents(index_dir)
    others = [name for name in contents.others if name not in parts]
    if others and contents.problem is not None:
        raise IndexFolderError(
            f"{index_dir!r} holds {INDEX_FILE} but no whole hf-ralm index: the index {contents.problem}. hf-ralm "
            f"removes only files it wrote, all there as its {INDEX_FILE} lists them, so nothing there was changed: "
            f"it holds {_entries(others)}; delete the folder yourself if none of it is yours, or choose a new or "
            "empty --index-dir.")
    if others and not contents.written:
        raise IndexFolderError(f"{index_dir!r} is not an hf-ralm index folder and is not empty: it holds "
                               f"{_entries(others)}. An index is built only into a new or empty folder or over an "
                               "hf-ralm index, and nothing there was changed: choose a new or empty --index-dir.")
    if others:
        raise IndexFolderError(f"{index_dir!r} holds {_entries(others)} that hf-ralm did not write: a build replaces "
                               f"only the files its {INDEX_FILE} lists, and nothing there was changed: move "
                               f"{'it' if len(others) == 1 else 'them'} out of the folder, or choose another "
                               "--index-dir.")
    if os.path.realpath(index_dir) == os.path.realpath(os.getcwd()):  # an index is moved into place: not this one
        raise IndexFolderError(f"{index_dir!r} is the working folder: an index needs a folder of its own; choose a "
                               "new or empty --index-dir.")
    return contents.written


def check_index(index_dir: str, retriever: str, files: Sequence[str] = (), keys: Sequence[str] = (),
                settings: dict | None = None) -> dict:
    """The ``hf_ralm_index.json`` of the usable ``retriever`` index in ``index_dir`` (see :func:`index_problem`).

    Raises:
        FileNotFoundError: the folder holds no finished index; the message says how to build one.
        IndexFolderError: the index cannot be used (damaged, older, another backend's, other settings); the message
            says what is wrong and how to rebuild it.
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
    """The error for the ``retriever`` index in ``index_dir`` that cannot be used (``problem``, as
    :func:`index_problem` words it), with how to rebuild it."""
    return IndexFolderError(f"The {retriever} index in {index_dir!r} {problem}. Rebuild it: "
                            f"{rebuild_hint(index_dir, retriever)}.")


def verify_index(index_dir: str, trust_stamps: bool = False) -> dict:
    """Check every file of the index in ``index_dir`` against the SHA-256 digest recorded when it was built, each
    one read whole (no file is trusted for being unchanged since it was last verified, unless ``trust_stamps``: the
    check a load makes): what ``hf-ralm index --verify DIR`` runs. A hybrid folder's two indexes are checked both.
    Verified files are stamped as such.

    Returns:
        ``{"index_dir", "checksum": "sha256", "files", "bytes"}``: what was verified.

    Raises:
        FileNotFoundError: no such folder.
        IndexFolderError: a file is damaged (the message names it and says how to rebuild the index), missing or of
            another size; the index records no checksums (built by an older hf-ralm); the folder holds no index
            hf-ralm built (a Lucene index from elsewhere, a pyserini prebuilt index: they have no checksums).

    Example::

        from hf_ralm.retrieval import verify_index

        verify_index("wiki-bm25")   # {'index_dir': 'wiki-bm25', 'checksum': 'sha256', 'files': 8, 'bytes': 1630284}
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


def reusable_index_info(index_dir: str, retriever: str, files: Sequence[str] = (), keys: Sequence[str] = (),
                        settings: dict | None = None) -> dict | None:
    """For ``build_or_load`` with a corpus: the ``hf_ralm_index.json`` of the index in ``index_dir`` when it is
    usable (:func:`index_problem`), else ``None``, and the index is (re)built there, which a logged warning says
    when the folder held an index that cannot be used. Another backend's index, a folder that is no whole hf-ralm
    index, or one that holds anything hf-ralm did not write, is never built over (:func:`check_build_folder`); a
    usable index is reused whatever lies beside it (reading it changes nothing)."""
    check_kind(index_dir, retriever)
    problem = index_problem(index_dir, retriever, files, keys, settings)
    if problem is None:
        return read_index_info(index_dir)
    check_build_folder(index_dir)
    if os.path.isfile(os.path.join(index_dir, INDEX_FILE)):
        # a warning: the index in the folder the user named is replaced
        logger.warning("hf-ralm: rebuilding the %s index in %s: it %s.", retriever, index_dir, problem)
    return None


@contextmanager
def reading_index(index_dir: str, retriever: str) -> Iterator[None]:
    """Report an error raised while a backend opens the files of a checked index (:func:`check_index`: all there, of
    the right sizes, yet unreadable) as :class:`~hf_ralm.errors.IndexFolderError` saying how to rebuild it."""
    try:
        yield
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise IndexFolderError(f"The {retriever} index in {index_dir!r} is damaged: its files cannot be read "
                               f"({type(error).__name__}: {error}). Rebuild it: "
                               f"{rebuild_hint(index_dir, retriever)}.") from error


def _is_paths(corpus) -> bool:
    return isinstance(corpus, (list, tuple)) and all(isinstance(p, str) for p in corpus) and len(corpus) > 0


def corpus_paths_and_articles(
    corpus: str | Sequence[str] | Iterable[dict], show_progress: bool = False,
    pace: Callable[[int, int], None] | None = None,
) -> tuple[list[str] | None, Iterable[dict]]:
    """``(paths, articles)`` for a corpus given as file path(s) (``articles`` then reads them lazily, with a
    progress bar over their bytes when ``show_progress``, and ``pace`` told how far: :func:`~hf_ralm.retrieval.
    corpus.read_corpora`) or as rows (``paths`` is then ``None``; a bar over the rows, with their number when they
    have one)."""
    from ..utils.progress import tqdm

    paths = [corpus] if isinstance(corpus, str) else list(corpus) if _is_paths(corpus) else None
    if paths:
        return paths, read_corpora(paths, show_progress, pace)
    total = len(corpus) if hasattr(corpus, "__len__") else None
    return None, tqdm(corpus, total=total, desc="Reading the corpus", unit=" rows", disable=not show_progress)


def check_corpus_files(paths: Iterable[str]) -> None:
    """Refuse the first of ``paths`` that is no corpus file (:func:`~hf_ralm.retrieval.corpus.check_corpus_file`)."""
    for path in paths:
        check_corpus_file(path)


def corpus_files(corpus: str | Sequence[str]) -> list[str]:
    """The corpus file path(s) given to ``build_or_load`` as a list, each checked to exist."""
    paths = [corpus] if isinstance(corpus, str) else list(corpus)
    check_corpus_files(paths)
    return paths


def building(index_dir: str):
    """The lock of the builds of ``index_dir``: held while a process checks whether the index is there and builds it
    when not, so that concurrent builds (the ranks of a torchrun job, the tasks of a Slurm array) never write one
    folder at once; the others wait, then find the index built (a waiter says who holds the lock and gives up after
    a timeout: :mod:`hf_ralm.runs.locks`).

    The lock file lies in hf-ralm's cache, ``<cache>/locks/<name>-<hash of the folder's real path>.lock``
    (:func:`hf_ralm_cache_dir`), not beside the folder: no lock file is left in the user's folders. The processes
    that build one folder share that cache (the default, ``~/.cache/hf-ralm``, is shared by the nodes of a cluster
    whose home folders are).
    """
    return file_lock(_cache_file(index_dir, "locks", ".lock"), f"the build of {index_dir}")


def _cache_file(index_dir: str, kind: str, suffix: str) -> str:
    """The file of hf-ralm's cache that belongs to the index folder ``index_dir``, whatever path names it:
    ``<cache>/<kind>/<name>-<hash of the folder's real path><suffix>`` (:func:`hf_ralm_cache_dir`): its build lock
    (:func:`building`), the stamps of its verified files (:func:`_content_problem`)."""
    real = os.path.realpath(index_dir)
    key = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(hf_ralm_cache_dir(), kind, f"{os.path.basename(real)}-{key}{suffix}")


BUILD_SECONDS_PER_MB = {"bm25": 0.65}
"""Seconds of an index build per MB of corpus file (as stored: gzip'd or not), measured on 2 CPU cores (the
Wikipedia sample, 150 MB gzip'd, built its BM25 index in about 95 s): what :func:`announce_build`'s estimate
scales."""


def announce_build(retriever: str, paths: Sequence[str] | None, index_dir: str) -> None:
    """One logged line (info) before a one-time build: what is built from what, where, and (for the backends measured in
    :data:`BUILD_SECONDS_PER_MB`) roughly how long; later runs reuse the folder."""
    source = "the given rows"
    estimate = ""
    if paths:
        megabytes = corpus_bytes(paths) / 1e6
        names = ", ".join(p if is_hub_corpus(p) else os.path.basename(p) for p in paths)
        size = "" if all(is_hub_corpus(p) for p in paths) else f" ({megabytes:,.{0 if megabytes >= 10 else 1}f} MB)"
        source = f"{names}{size}"
        if retriever in BUILD_SECONDS_PER_MB:
            minutes = round(megabytes * BUILD_SECONDS_PER_MB[retriever] / 60)
            took = "under a minute" if minutes < 1 else f"roughly {minutes} minute{'s' if minutes > 1 else ''}"
            estimate = f", {took} on 2 CPU cores"
    logger.info("hf-ralm: building the %s index of %s in %s (once%s; later runs reuse it)", retriever, source,
                index_dir, estimate)


BUILD_READ_SHARE = {"bm25": 0.85}
"""The share of a build's time spent reading (and analysing) the corpus, for the backends whose build is mostly that:
a BM25 build of the Wikipedia sample read for 42 s of its 50 s (the rest: the score matrix and the passages table).
What :func:`build_pace` scales the measured reading time by."""

RESTATE_AFTER_S = 10.0
"""Seconds of reading the corpus after which :func:`build_pace` says the build's estimate at the speed measured."""


def build_pace(retriever: str, clock: Callable[[], float] = time.perf_counter) -> Callable[[int, int], None] | None:
    """What the corpus reader calls with ``(bytes read, bytes in all)`` during a build of a ``retriever`` index
    measured in :data:`BUILD_READ_SHARE` (``None`` for others): once the read has run :data:`RESTATE_AFTER_S` seconds
    past its first step (which also starts the analysis workers: timed, it tripled the estimate), it logs the build's
    estimate again at the speed this machine reads now (its load, not the idle machine of
    :data:`BUILD_SECONDS_PER_MB`: a build announced as 2 minutes took 6 on 2 busy cores).

    Example::

        pace = build_pace("bm25")
        pace(0, 150_000_000); ...; pace(40_000_000, 150_000_000)   # 'hf-ralm: ... roughly 2 min in all ...'
    """
    if retriever not in BUILD_READ_SHARE:
        return None
    started: float | None = None
    measured, said = Pace(clock), False

    def update(done: int, total: int) -> None:
        nonlocal started, said
        if started is None:  # the read's first step: the workers start, the pipeline fills
            started = clock()
            return
        left = measured.seconds_left(done, total)
        if said or left is None or measured.elapsed() < RESTATE_AFTER_S:
            return
        said = True
        elapsed = clock() - started
        whole = (elapsed + left) / BUILD_READ_SHARE[retriever]
        logger.info("hf-ralm: the %s build, timed on %s of reading: roughly %s in all (%s more)", retriever,
                    format_duration(elapsed), format_duration(whole), format_duration(max(whole - elapsed, 0.0)))

    return update


def build_folder(index_dir: str, retriever: str | None = None) -> str:
    """``<index_dir>.tmp``, where a build of ``index_dir`` is written before it is moved there: made when missing (or
    empty), with :data:`BUILD_MARKER` in it, at once (a folder prepared beside it, then renamed, so that the workers
    of a shared build all find the marker); one that hf-ralm did not make is the user's, and refused. Refused before
    anything is written when ``index_dir`` is no folder to build a ``retriever`` index into
    (:func:`check_build_folder`). Made as any folder is, with the permissions the umask leaves.

    Example::

        build_folder("wiki-dense")   # '/home/me/wiki-dense.tmp'
    """
    check_build_folder(index_dir, retriever)
    tmp_dir = os.path.abspath(index_dir) + ".tmp"
    if not _is_build_folder(tmp_dir):
        os.makedirs(os.path.dirname(tmp_dir), exist_ok=True)
        staged = f"{tmp_dir}.{uuid.uuid4().hex[:12]}"  # a name of its own, as tempfile's, but not private (0o700)
        os.mkdir(staged)
        open(os.path.join(staged, BUILD_MARKER), "w").close()
        try:
            os.rename(staged, tmp_dir)  # replaces only a missing or empty folder
        except OSError:  # something is there: another worker's build folder, or the user's
            shutil.rmtree(staged)
    if not _is_build_folder(tmp_dir):
        raise IndexFolderError(f"{tmp_dir!r}, where the build of {index_dir!r} is written, was not made by hf-ralm "
                               f"(no {BUILD_MARKER} in it), so it is neither used nor removed: move it away or choose "
                               "another --index-dir.")
    return tmp_dir


def clear_build_folder(tmp_dir: str, keep: Sequence[str] = ()) -> None:
    """Remove what an interrupted build left in its folder ``tmp_dir`` (:func:`build_folder`), but for the folder's
    marker and the entries named in ``keep`` (the dense build's encoded chunks)."""
    for name in os.listdir(tmp_dir):
        if name not in (BUILD_MARKER, *keep):
            path = os.path.join(tmp_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)


@contextlib.contextmanager
def new_build(index_dir: str, retriever: str | None = None) -> Iterator[str]:
    """An empty build folder for ``index_dir`` (:func:`build_folder`, which first checks that a ``retriever`` index
    may be built there; what an interrupted build left is removed) to build into, removed again when the build fails
    or is interrupted (a bad corpus row, no passages, Ctrl-C), so no half-written build is left behind;
    :func:`finish_build`, inside, moves it to ``index_dir``. A full disk that the backend's writes report naming no
    file (numpy, pyarrow) names ``index_dir`` (:func:`~hf_ralm.utils.atomic.naming_full_disk`)."""
    tmp_dir = build_folder(index_dir, retriever)
    clear_build_folder(tmp_dir)
    try:
        with naming_full_disk(index_dir):
            yield tmp_dir
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise


def _install(tmp_dir: str, index_dir: str) -> None:
    """Move the filled build folder ``tmp_dir`` to ``index_dir``: renamed there when it is missing; otherwise the
    files hf-ralm wrote there are removed, by name, with the sub-folders they leave empty (checked again, since
    something may have been put there while the build ran: :func:`check_build_folder` refuses a folder that holds
    anything else), and the build's entries are moved in, its ``hf_ralm_index.json`` last, so that the index is
    whole only once all of it is there. The folder itself stays, with its permissions."""
    written = check_build_folder(index_dir)
    os.remove(os.path.join(tmp_dir, BUILD_MARKER))  # an index now (its hf_ralm_index.json says so)
    if not os.path.lexists(index_dir):
        os.replace(tmp_dir, index_dir)
        return
    for name in written:  # hf_ralm_index.json last: a folder a crash left half-emptied still says what was hf-ralm's
        os.remove(os.path.join(index_dir, name))
    for entry in sorted({name.split("/")[0] for name in written if "/" in name}):
        for folder, _, _ in os.walk(os.path.join(index_dir, entry), topdown=False):
            os.rmdir(folder)  # emptied: every file under it was hf-ralm's (a folder of the user's there is refused)
    entries = sorted(os.listdir(tmp_dir), key=lambda name: name == INDEX_FILE)
    for name in entries:
        target = os.path.join(index_dir, name)
        if os.path.lexists(target):  # put there since the check: never replaced
            raise IndexFolderError(f"{target!r} appeared while the index was built in {index_dir!r}: hf-ralm did not "
                                   "write it, so it was left as it is; move it away and build again.")
        os.replace(os.path.join(tmp_dir, name), target)
    os.rmdir(tmp_dir)


def finish_build(
    tmp_dir: str,
    index_dir: str,
    retriever: str,
    paths: Sequence[str] | None,
    words_per_passage: int,
    num_passages: int,
    settings: dict,
) -> None:
    """Write ``hf_ralm_index.json`` into the filled ``tmp_dir`` (with the size and the SHA-256 digest of every file)
    and move ``tmp_dir`` to ``index_dir`` (:func:`_install`), where its files are stamped as verified: the first load
    hashes none of them again."""
    files = _file_sizes(tmp_dir)  # what index_problem checks before the index is used
    del files[BUILD_MARKER]  # removed when the build folder becomes the index
    hashed = hash_files(tmp_dir, list(files))
    info = {
        "retriever": retriever,
        "corpus": [p if is_hub_corpus(p) else os.path.abspath(p) for p in paths] if paths else None,
        "fingerprint": corpus_fingerprint(paths, words_per_passage) if paths else None,
        "words_per_passage": words_per_passage,
        "num_passages": num_passages,
        **settings,
        "files": files,
        DIGEST_KEY: {name: digest for name, (digest, *_) in hashed.items()},
    }
    with open(os.path.join(tmp_dir, INDEX_FILE), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    _install(tmp_dir, index_dir)
    stamp_moved(index_dir, hashed, _cache_file(index_dir, "index-checks", ".json"))


def index_matches(
    info: dict | None, paths: Sequence[str], words_per_passage: int, settings: dict | None = None
) -> bool:
    """Whether an index (its ``info``) can be reused: it records ``settings`` and was built from the same corpus
    files (same fingerprint, hence the same ``words_per_passage``)."""
    if info is None or any(info.get(k) != v for k, v in (settings or {}).items()):
        return False
    return info.get("fingerprint") == corpus_fingerprint(paths, words_per_passage)


def hf_ralm_cache_dir() -> str:
    """hf-ralm's cache folder: ``$HF_HOME/hf-ralm`` when ``HF_HOME`` is set, else ``$XDG_CACHE_HOME/hf-ralm``, else
    ``~/.cache/hf-ralm``.

    Example::

        hf_ralm_cache_dir()   # '/home/me/.cache/hf-ralm'
    """
    for variable in ("HF_HOME", "XDG_CACHE_HOME"):
        if os.environ.get(variable):
            return os.path.join(os.environ[variable], "hf-ralm")
    return os.path.join(os.path.expanduser("~"), ".cache", "hf-ralm")


def default_index_dir(retriever: str, corpus: str | Sequence[str] | None, words_per_passage: int) -> str:
    """Where ``retriever``'s index of ``corpus`` goes when no folder is given: ``<cache>/indexes/<retriever>-<corpus
    fingerprint[:16]>``, so the same corpus files (and passage size) find their index again. Says where (logged:
    info).

    Example::

        default_index_dir("bm25", "wiki.jsonl.gz", 100)   # '/home/me/.cache/hf-ralm/indexes/bm25-3f1c0e9a7b2d4c11'
    """
    if corpus is None:
        raise ValueError(
            f"The {retriever} retriever needs an index folder (index_dir=, --index-dir), or a corpus (corpus=, "
            f"--corpus) to build its index in {os.path.join(hf_ralm_cache_dir(), 'indexes')}."
        )
    fingerprint = corpus_fingerprint(corpus_files(corpus), words_per_passage)
    path = os.path.join(hf_ralm_cache_dir(), "indexes", f"{retriever}-{fingerprint[:16]}")
    logger.info("hf-ralm: the %s index is in %s", retriever, path)
    return path


def _within(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def path_for_folder(path: str, folder: str) -> str:
    """How a file saved in ``folder`` records ``path``: relative to ``folder`` when it lies inside it (the folder can
    then be moved), absolute otherwise (which :func:`saved_path` refuses to follow: the caller must give it; an index
    folder is followed on the machine where it was saved, :func:`saved_index_dir`). :func:`saved_path` reads it
    back."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.relpath(path, folder) if _within(path, folder) else path


def leads_outside(path: str, folder: str, follow_last: bool = True) -> bool:
    """Whether ``path``, as a file of ``folder`` records it, names something outside ``folder``: an absolute path,
    one that climbs out with ``..``, or one through a symbolic link that leads out (its last part only when
    ``follow_last``: the files of a Hub download are links into the cache's blobs).

    Example:
        >>> leads_outside("index", "saved"), leads_outside("../wiki-bm25", "saved"), leads_outside("/data", "saved")
        (False, True, True)
    """
    if os.path.isabs(path) or os.path.splitdrive(path)[0]:
        return True
    joined, base = os.path.abspath(os.path.join(folder, path)), os.path.abspath(folder)
    checked = joined if follow_last else os.path.dirname(joined)
    return not _within(joined, base) or not _within(os.path.realpath(checked), os.path.realpath(base))


def names_a_local_path(name: str) -> bool:
    """Whether a name a saved folder records (a prebuilt index, an encoder) would be opened as a local file or folder
    rather than looked up by name: it looks like a path (:func:`~hf_ralm.utils.paths.looks_local`) or one is there."""
    return looks_local(name) or os.path.exists(name)


FOLLOWED_ONLY_INSIDE = "hf-ralm follows the paths of a saved or downloaded folder only inside it"
"""Why a path that leads out of a saved folder is not followed, unless the caller says more
(:func:`outside_folder_error`)."""


def outside_folder_error(folder: str, file: str, key: str, path: str, fix: str,
                         why: str = FOLLOWED_ONLY_INSIDE) -> SavedFolderError:
    """The error for a path (``key`` in ``file`` of the saved or downloaded ``folder``) that leads out of the folder:
    which file, which key, the path, ``why`` it is not followed, and ``fix``, how to go on."""
    return SavedFolderError(f"{os.path.join(folder, file)}: its {key} {path!r} leads outside {folder!r}, and {why}: "
                            f"{fix}")


def saved_path(path: str, folder: str, file: str, key: str, fix: str) -> str:
    """``path``, recorded under ``key`` in ``file`` of the saved (or downloaded) ``folder`` by
    :func:`path_for_folder`, joined to ``folder``; one that leads outside it (:func:`leads_outside`) raises
    :class:`~hf_ralm.errors.SavedFolderError` saying ``fix``: a folder from elsewhere (a Hub repository) must not make
    hf-ralm open, build or delete anything outside it.

    Example::

        saved_path("index", "my-ralm", "retriever_config.json", "index_dir", "...")   # 'my-ralm/index'
    """
    if leads_outside(path, folder):
        raise outside_folder_error(folder, file, key, path, fix)
    return os.path.join(folder, path)


SAVED_INDEX_IDENTITY = "index_identity"
"""The key of a saved retriever's description (``retriever_config.json``) that holds the identity
(:func:`index_identity`) of an index folder it records outside the saved folder, by its absolute path: what
:func:`saved_index_dir` recognises that index by on the machine where it was saved."""


def index_identity(index_dir: str) -> dict | None:
    """What recognises the index in ``index_dir`` when it is looked at again: its retriever, the fingerprint of its
    corpus and a digest of the files (names and sizes) its ``hf_ralm_index.json`` lists; ``None`` for a folder without
    a valid ``hf_ralm_index.json`` or one that records no corpus fingerprint (nothing to recognise it by).

    Example::

        index_identity("wiki-bm25")   # {'retriever': 'bm25', 'fingerprint': 'e0b8cc01...', 'files': '5c1f...'}
    """
    info, _ = read_manifest(index_dir)
    if info is None or not info.get("fingerprint"):
        return None
    files = json.dumps(sorted((info.get("files") or {}).items()))
    return {"retriever": info.get("retriever"), "fingerprint": info["fingerprint"],
            "files": hashlib.sha256(files.encode("utf-8")).hexdigest()[:16]}


def recorded_index_dir(index_dir: str, folder: str) -> dict:
    """How a retriever saved in ``folder`` records its index folder ``index_dir``: ``index_dir`` as
    :func:`path_for_folder` writes it and, for an index outside ``folder``, its identity (:func:`index_identity`)
    under :data:`SAVED_INDEX_IDENTITY`, by which :func:`saved_index_dir` recognises it on this machine.

    Example::

        recorded_index_dir("wiki-bm25", "my-ralm")   # {'index_dir': '/data/wiki-bm25', 'index_identity': {...}}
    """
    recorded = path_for_folder(index_dir, folder)
    identity = index_identity(index_dir) if os.path.isabs(recorded) else None
    return {"index_dir": recorded, **({SAVED_INDEX_IDENTITY: identity} if identity else {})}


def is_hub_download(folder: str) -> bool:
    """Whether ``folder`` was downloaded from the Hub: a snapshot in a Hugging Face cache
    (``.../models--OWNER--NAME/snapshots/REVISION``, what ``snapshot_download`` returns) or a folder that
    ``hf download --local-dir`` filled (it keeps ``.cache/huggingface`` inside).

    Example:
        >>> is_hub_download("/cache/hub/models--me--ralm/snapshots/0123abcd"), is_hub_download("/data/my-ralm")
        (True, False)
    """
    parts = os.path.realpath(folder).split(os.sep)
    in_cache = any(part.startswith(("models--", "datasets--", "spaces--")) and parts[i + 1:i + 2] == ["snapshots"]
                   for i, part in enumerate(parts))
    return in_cache or os.path.isdir(os.path.join(folder, ".cache", "huggingface"))


def saved_index_dir(recorded: str, identity, folder: str, file: str, fix: str, may_follow: bool) -> str:
    """The index folder recorded as ``recorded`` (under ``index_dir`` in ``file`` of the saved or downloaded
    ``folder``, by :func:`recorded_index_dir`) on this machine: inside ``folder``, joined to it; outside it, its
    absolute path, followed to be read only, when ``folder`` was saved here (not downloaded from the Hub:
    :func:`is_hub_download`), ``may_follow`` (no corpus given that would build there) and that folder holds the index
    of the ``identity`` recorded when it was saved (:func:`index_identity`). Otherwise
    :class:`~hf_ralm.errors.SavedFolderError` says why and ``fix``: a folder from elsewhere never makes hf-ralm open
    anything outside it, and nothing ever builds or deletes there.

    Example::

        saved_index_dir("index", None, "my-ralm", "retriever_config.json", "...", True)   # 'my-ralm/index'
    """
    if not leads_outside(recorded, folder):
        return os.path.join(folder, recorded)
    if is_hub_download(folder):
        why = "hf-ralm follows the paths of a folder downloaded from the Hub only inside it"
    elif not os.path.isabs(recorded) or not isinstance(identity, dict):
        why = FOLLOWED_ONLY_INSIDE + " (an index saved outside it on this machine, with its identity, is read there)"
    elif not may_follow:
        why = "a corpus given would build there: hf-ralm builds only inside a saved folder"
    elif index_identity(recorded) != identity:
        why = "it no longer holds the index this folder was saved with"
    else:
        return recorded
    raise outside_folder_error(folder, file, "index_dir", recorded, fix, why)


def copy_index(index_dir: str, target: str) -> str:
    """Copy the index folder ``index_dir`` to ``target`` (into a missing or empty folder or over an hf-ralm index
    there that holds nothing else, :func:`check_build_folder`; through ``<target>.tmp`` so an interrupted copy leaves
    no half index) unless it is already there; returns ``target``."""
    if os.path.realpath(index_dir) != os.path.realpath(target):
        with new_build(target) as tmp_dir:
            shutil.copytree(index_dir, tmp_dir, dirs_exist_ok=True)
            _install(tmp_dir, target)
    return target
