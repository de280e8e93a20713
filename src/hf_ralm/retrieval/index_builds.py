"""Building an index folder atomically: every retrieval backend's build goes through here.

A build writes everything under ``<index_dir>.tmp`` and moves it to ``index_dir`` only when complete
(``hf_ralm_index.json`` last), so an interrupted build leaves no half-index behind, and builds of one folder take turns
(``building``: the first builds, the others wait and then reuse its index).

What hf-ralm deletes, by name only: an index is built into a missing or empty folder, or over an hf-ralm index
(``check_build_folder``), and a (re)build removes exactly the files that index's ``hf_ralm_index.json`` lists as written
by hf-ralm, the ``hf_ralm_index.json`` itself and the sub-folders those files leave empty (``folder_contents``, in
``hf_ralm.retrieval.index_folder``), never the folder. Any other entry (a user's notes, a corpus kept inside the folder,
a folder a stray ``hf_ralm_index.json`` was copied into) stops the build with one line naming it, and nothing is
changed. A temporary build folder is emptied or removed only when it holds ``BUILD_MARKER``, written when hf-ralm makes
it (``build_folder``). An index that cannot be used is rebuilt when the corpus is given (``reusable_index_info``, which
logs a warning), if it is hf-ralm's by the rule above (one whose files are missing or of other sizes is not: the user
removes it; one whose files hold other bytes, at their sizes, is).

Without a folder, an index goes to ``<cache>/indexes/<backend>-<corpus fingerprint[:16]>`` (``default_index_dir``,
``<cache>`` from ``hf_ralm_cache_dir``).

Examples:
    What ``LocalIndexRetriever``'s build does for every backend:

    ```python
    paths, articles = corpus_paths_and_articles(corpus)
    with new_build(index_dir) as tmp_dir:   # removed if the build fails or is interrupted
        ...  # write the backend's files into tmp_dir
        finish_build(tmp_dir, index_dir, "bm25", paths, words_per_passage, num_passages=num_passages, settings=settings)
    ```
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from typing import Callable, Iterable, Iterator, Sequence

from transformers.utils import logging

from ..errors import IndexFolderError
from ..runs.locks import file_lock
from ..utils.atomic import naming_full_disk
from ..utils.progress import Pace, format_duration
from .corpus import check_corpus_file, corpus_bytes, corpus_fingerprint, is_hub_corpus, read_corpora
from .index_checks import DIGEST_KEY, hash_files, stamp_moved
from .index_folder import cache_file, check_kind, file_sizes, folder_contents, hf_ralm_cache_dir, index_problem
from .index_folder import read_index_info
from .index_manifest import INDEX_FILE

logger = logging.get_logger(__name__)

BUILD_MARKER = ".hf_ralm_build"
"""The (empty) file in a temporary build folder, ``<index_dir>.tmp``, that says hf-ralm made that folder: only such a
folder is ever emptied or removed (a user's folder of that name is refused)."""


def _is_build_folder(folder: str) -> bool:
    """Whether ``folder`` is a temporary build folder hf-ralm made (``BUILD_MARKER``), which it may empty or remove."""
    return os.path.isfile(os.path.join(folder, BUILD_MARKER))


def _entries(names: Sequence[str]) -> str:
    """A few of a folder's entries and their number, for a message: ``'a.txt, b.txt, c, ... (12 entries)'``."""
    shown = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
    return f"{shown} ({len(names)} entr{'y' if len(names) == 1 else 'ies'})"


def check_build_folder(index_dir: str, retriever: str | None = None, parts: Sequence[str] = ()) -> tuple[str, ...]:
    """Check that an index may be built into ``index_dir``: a missing or empty folder, or an hf-ralm index (of
    ``retriever`` when given: ``check_kind``) that holds nothing hf-ralm did not write (``folder_contents``), or one
    that holds only ``parts``.

    Args:
        index_dir: the folder to build into.
        retriever: the backend whose index the folder may hold (``None``: any).
        parts: entries the folder may hold besides (a hybrid folder: its sides' folders, which their own builds check).

    Returns:
        The files there that hf-ralm wrote, which the build replaces (``FolderContents.written``).

    Raises:
        IndexFolderError: anything else (a mistyped ``--index-dir`` naming the corpus's folder, the working folder, a
            user's file or a corpus put inside an index, a damaged or incomplete index), refused, untouched.

    Examples:
        ```python
        check_build_folder("data", "bm25")
        # IndexFolderError: 'data' is not an hf-ralm index folder and is not empty: it holds notes.txt, wiki.jsonl
        # (2 entries). ...
        ```
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


def reusable_index_info(index_dir: str, retriever: str, files: Sequence[str] = (), keys: Sequence[str] = (),
                        settings: dict | None = None) -> dict | None:
    """For ``build_or_load`` with a corpus: the ``hf_ralm_index.json`` of the index in ``index_dir`` when it is usable
    (``index_problem``), else ``None``, and the index is (re)built there, which a logged warning says when the folder
    held an index that cannot be used. Another backend's index, a folder that is no whole hf-ralm index, or one that
    holds anything hf-ralm did not write, is never built over (``check_build_folder``); a usable index is reused
    whatever lies beside it (reading it changes nothing).

    Args:
        index_dir: the folder to reuse or build into.
        retriever: the backend that builds there.
        files: its ``index_files`` (``LocalIndexRetriever``'s hooks).
        keys: its ``index_keys``.
        settings: its ``index_settings``.

    Returns:
        The index's ``hf_ralm_index.json``, or ``None`` when it is to be (re)built.
    """
    check_kind(index_dir, retriever)
    problem = index_problem(index_dir, retriever, files, keys, settings)
    if problem is None:
        return read_index_info(index_dir)
    check_build_folder(index_dir)
    if os.path.isfile(os.path.join(index_dir, INDEX_FILE)):
        # a warning: the index in the folder the user named is replaced
        logger.warning("hf-ralm: rebuilding the %s index in %s: it %s.", retriever, index_dir, problem)
    return None


def _is_paths(corpus) -> bool:
    return isinstance(corpus, (list, tuple)) and all(isinstance(p, str) for p in corpus) and len(corpus) > 0


def corpus_paths_and_articles(
    corpus: str | Sequence[str] | Iterable[dict], show_progress: bool = False,
    pace: Callable[[int, int], None] | None = None,
) -> tuple[list[str] | None, Iterable[dict]]:
    """``(paths, articles)`` for a corpus given as file path(s) (``articles`` then reads them lazily: ``read_corpora``,
    in ``hf_ralm.retrieval.corpus``) or as rows (``paths`` is then ``None``).

    Args:
        corpus: the corpus file path(s), or rows.
        show_progress: show a progress bar, over the files' bytes or over the rows (with their number when they have
            one).
        pace: told how far the reading of files is (``(bytes read, bytes in all)``).

    Returns:
        The corpus file paths (``None`` for rows) and the articles, read lazily.
    """
    from ..utils.progress import tqdm

    paths = [corpus] if isinstance(corpus, str) else list(corpus) if _is_paths(corpus) else None
    if paths:
        return paths, read_corpora(paths, show_progress, pace)
    total = len(corpus) if hasattr(corpus, "__len__") else None
    return None, tqdm(corpus, total=total, desc="Reading the corpus", unit=" rows", disable=not show_progress)


def check_corpus_files(paths: Iterable[str]) -> None:
    """Refuse the first of ``paths`` that is no corpus file (``check_corpus_file``)."""
    for path in paths:
        check_corpus_file(path)


def corpus_files(corpus: str | Sequence[str]) -> list[str]:
    """The corpus file path(s) given to ``build_or_load`` as a list, each checked to exist."""
    paths = [corpus] if isinstance(corpus, str) else list(corpus)
    check_corpus_files(paths)
    return paths


def building(index_dir: str):
    """The lock of the builds of ``index_dir``: held while a process checks whether the index is there and builds it
    when not, so that concurrent builds (the ranks of a torchrun job, the tasks of a Slurm array) never write one folder
    at once; the others wait, then find the index built (a waiter says who holds the lock and gives up after a timeout:
    ``hf_ralm.runs.locks``).

    The lock file lies in hf-ralm's cache, ``<cache>/locks/<name>-<hash of the folder's real path>.lock``
    (``hf_ralm_cache_dir``), not beside the folder: no lock file is left in the user's folders. The processes that build
    one folder share that cache (the default, ``~/.cache/hf-ralm``, is shared by the nodes of a cluster whose home
    folders are).

    Args:
        index_dir: the index folder.

    Returns:
        The lock, a context manager.
    """
    return file_lock(cache_file(index_dir, "locks", ".lock"), f"the build of {index_dir}")


BUILD_SECONDS_PER_MB = {"bm25": 0.65}
"""Seconds of an index build per MB of corpus file (as stored: gzip'd or not), measured on 2 CPU cores (the Wikipedia
sample, 150 MB gzip'd, built its BM25 index in about 95 s): what ``announce_build``'s estimate scales."""


def announce_build(retriever: str, paths: Sequence[str] | None, index_dir: str) -> None:
    """One logged line (info) before a one-time build: what is built from what, where, and (for the backends measured in
    ``BUILD_SECONDS_PER_MB``) roughly how long; later runs reuse the folder.

    Args:
        retriever: the backend's name.
        paths: the corpus files (``None``: rows).
        index_dir: the index folder.
    """
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
"""The share of a build's time spent reading (and analysing) the corpus, for the backends whose build is mostly that: a
BM25 build of the Wikipedia sample read for 42 s of its 50 s (the rest: the score matrix and the passages table). What
``build_pace`` scales the measured reading time by."""

RESTATE_AFTER_S = 10.0
"""Seconds of reading the corpus after which ``build_pace`` says the build's estimate at the speed measured."""


def build_pace(retriever: str, clock: Callable[[], float] = time.perf_counter) -> Callable[[int, int], None] | None:
    """What the corpus reader calls with ``(bytes read, bytes in all)`` during a build of a ``retriever`` index: once
    the read has run ``RESTATE_AFTER_S`` seconds past its first step (which also starts the analysis workers: timed, it
    tripled the estimate), it logs the build's estimate again at the speed this machine reads now (its load, not the
    idle machine of ``BUILD_SECONDS_PER_MB``: a build announced as 2 minutes took 6 on 2 busy cores).

    Args:
        retriever: the backend's name.
        clock: the clock the reading is timed by.

    Returns:
        The function, for the backends measured in ``BUILD_READ_SHARE``; ``None`` for others.

    Examples:
        ```python
        pace = build_pace("bm25")
        pace(0, 150_000_000); ...; pace(40_000_000, 150_000_000)   # 'hf-ralm: ... roughly 2 min in all ...'
        ```
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
    empty), with ``BUILD_MARKER`` in it, at once (a folder prepared beside it, then renamed, so that the workers of a
    shared build all find the marker). Made as any folder is, with the permissions the umask leaves.

    Args:
        index_dir: the index folder.
        retriever: the backend whose index the folder may hold (``None``: any).

    Returns:
        The build folder's path.

    Raises:
        IndexFolderError: ``index_dir`` is no folder to build a ``retriever`` index into (``check_build_folder``),
            refused before anything is written; or ``<index_dir>.tmp`` exists and hf-ralm did not make it (the user's).

    Examples:
        ```python
        build_folder("wiki-dense")   # '/home/me/wiki-dense.tmp'
        ```
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
    """Remove what an interrupted build left in its folder ``tmp_dir`` (``build_folder``), but for the folder's marker
    and the entries named in ``keep`` (the dense build's encoded chunks)."""
    for name in os.listdir(tmp_dir):
        if name not in (BUILD_MARKER, *keep):
            path = os.path.join(tmp_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)


@contextlib.contextmanager
def new_build(index_dir: str, retriever: str | None = None) -> Iterator[str]:
    """An empty build folder for ``index_dir`` to build into, removed again when the build fails or is interrupted (a
    bad corpus row, no passages, Ctrl-C), so no half-written build is left behind; ``finish_build``, inside, moves it to
    ``index_dir``. A full disk that the backend's writes report naming no file (numpy, pyarrow) names ``index_dir``
    (``naming_full_disk``, in ``hf_ralm.utils.atomic``).

    Args:
        index_dir: the index folder.
        retriever: the backend whose index is built (``build_folder`` first checks that one may be built there; what an
            interrupted build left is removed).

    Yields:
        The build folder's path.
    """
    tmp_dir = build_folder(index_dir, retriever)
    clear_build_folder(tmp_dir)
    try:
        with naming_full_disk(index_dir):
            yield tmp_dir
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise


def _install(tmp_dir: str, index_dir: str) -> None:
    """Move the filled build folder ``tmp_dir`` to ``index_dir``: renamed there when it is missing; otherwise the files
    hf-ralm wrote there are removed, by name, with the sub-folders they leave empty (checked again, since something may
    have been put there while the build ran: ``check_build_folder`` refuses a folder that holds anything else), and the
    build's entries are moved in, its ``hf_ralm_index.json`` last, so that the index is whole only once all of it is
    there. The folder itself stays, with its permissions."""
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
    *,
    num_passages: int,
    settings: dict,
) -> None:
    """Write ``hf_ralm_index.json`` into the filled ``tmp_dir`` (with the size and the SHA-256 digest of every file) and
    move ``tmp_dir`` to ``index_dir`` (``_install``), where its files are stamped as verified: the first load hashes
    none of them again.

    Args:
        tmp_dir: the build folder.
        index_dir: the index folder.
        retriever: the backend's name.
        paths: the corpus files (``None``: rows, which record no corpus and no fingerprint).
        words_per_passage: the passage size.
        num_passages: the passages indexed.
        settings: what the backend records (its scoring, its text analysis).
    """
    files = file_sizes(tmp_dir)  # what index_problem checks before the index is used
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
    stamp_moved(index_dir, hashed, cache_file(index_dir, "index-checks", ".json"))


def index_matches(
    info: dict | None, paths: Sequence[str], words_per_passage: int, settings: dict | None = None
) -> bool:
    """Whether an index (its ``info``) can be reused: it records ``settings`` and was built from the same corpus files
    (same fingerprint, hence the same ``words_per_passage``)."""
    if info is None or any(info.get(k) != v for k, v in (settings or {}).items()):
        return False
    return info.get("fingerprint") == corpus_fingerprint(paths, words_per_passage)


def default_index_dir(retriever: str, corpus: str | Sequence[str] | None, words_per_passage: int) -> str:
    """Where ``retriever``'s index of ``corpus`` goes when no folder is given:
    ``<cache>/indexes/<retriever>-<corpus fingerprint[:16]>``, so the same corpus files (and passage size) find their
    index again. Says where (logged: info).

    Args:
        retriever: the backend's name.
        corpus: the corpus file(s).
        words_per_passage: the passage size.

    Returns:
        The index folder's path.

    Raises:
        ValueError: no corpus (the message asks for an index folder or a corpus).

    Examples:
        ```python
        default_index_dir("bm25", "wiki.jsonl.gz", 100)   # '/home/me/.cache/hf-ralm/indexes/bm25-3f1c0e9a7b2d4c11'
        ```
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


def copy_index(index_dir: str, target: str) -> str:
    """Copy the index folder ``index_dir`` to ``target`` (into a missing or empty folder or over an hf-ralm index there
    that holds nothing else, ``check_build_folder``; through ``<target>.tmp`` so an interrupted copy leaves no half
    index) unless it is already there.

    Args:
        index_dir: the index folder.
        target: where the copy goes.

    Returns:
        ``target``.
    """
    if os.path.realpath(index_dir) != os.path.realpath(target):
        with new_build(target) as tmp_dir:
            shutil.copytree(index_dir, tmp_dir, dirs_exist_ok=True)
            _install(tmp_dir, target)
    return target
