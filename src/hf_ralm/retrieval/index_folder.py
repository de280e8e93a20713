"""The index folder both retrieval backends (``bm25``, ``lucene``) write and reuse.

A folder holds the backend's own files beside ``hf_ralm_index.json``, which records the retriever, the corpus files,
their fingerprint (:func:`~hf_ralm.retrieval.corpus.corpus_fingerprint`), the passage size, the number of passages
and the backend's settings. A build writes everything under ``<index_dir>.tmp`` and renames it over ``index_dir``
only when complete, so an interrupted build leaves no half-index behind.

Without a folder, an index goes to ``<cache>/indexes/<backend>-<corpus fingerprint[:16]>``
(:func:`default_index_dir`, ``<cache>`` from :func:`hf_ralm_cache_dir`). A retriever saved with ``save_pretrained``
records its index folder relative to the saved folder when it lies inside it (:func:`path_for_folder`), so that
folder can be moved or pushed to the Hub.

Example (inside a backend's ``build``)::

    paths, articles = corpus_paths_and_articles(corpus)
    tmp_dir = start_build(index_dir)
    ...  # write the backend's files into tmp_dir
    finish_build(tmp_dir, index_dir, "bm25", paths, words_per_passage, num_passages, settings)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Iterable, Sequence

from .corpus import corpus_fingerprint, read_corpus

INDEX_FILE = "hf_ralm_index.json"


def read_index_info(index_dir: str) -> dict | None:
    """The ``hf_ralm_index.json`` of an index folder, or ``None`` if the folder holds no finished index."""
    path = os.path.join(index_dir, INDEX_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _is_paths(corpus) -> bool:
    return isinstance(corpus, (list, tuple)) and all(isinstance(p, str) for p in corpus) and len(corpus) > 0


def corpus_paths_and_articles(
    corpus: str | Sequence[str] | Iterable[dict],
) -> tuple[list[str] | None, Iterable[dict]]:
    """``(paths, articles)`` for a corpus given as file path(s) (``articles`` then reads them lazily) or as rows
    (``paths`` is then ``None``)."""
    paths = [corpus] if isinstance(corpus, str) else list(corpus) if _is_paths(corpus) else None
    articles = (row for path in paths for row in read_corpus(path)) if paths else corpus
    return paths, articles


def check_corpus_files(paths: Iterable[str]) -> None:
    """Raise :class:`FileNotFoundError` for the first corpus file that does not exist."""
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Corpus file not found: {path!r}.")


def corpus_files(corpus: str | Sequence[str]) -> list[str]:
    """The corpus file path(s) given to ``build_or_load`` as a list, each checked to exist."""
    paths = [corpus] if isinstance(corpus, str) else list(corpus)
    check_corpus_files(paths)
    return paths


def start_build(index_dir: str) -> str:
    """A fresh, empty ``<index_dir>.tmp`` (a leftover one from an interrupted build is removed) to build into."""
    tmp_dir = index_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    os.makedirs(tmp_dir)
    return tmp_dir


def finish_build(
    tmp_dir: str,
    index_dir: str,
    retriever: str,
    paths: Sequence[str] | None,
    words_per_passage: int,
    num_passages: int,
    settings: dict,
) -> None:
    """Write ``hf_ralm_index.json`` into the filled ``tmp_dir`` and rename ``tmp_dir`` over ``index_dir``."""
    info = {
        "retriever": retriever,
        "corpus": [os.path.abspath(p) for p in paths] if paths else None,
        "fingerprint": corpus_fingerprint(paths, words_per_passage) if paths else None,
        "words_per_passage": words_per_passage,
        "num_passages": num_passages,
        **settings,
    }
    with open(os.path.join(tmp_dir, INDEX_FILE), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    shutil.rmtree(index_dir, ignore_errors=True)
    os.replace(tmp_dir, index_dir)


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

    Example:
        >>> hf_ralm_cache_dir()                                            # doctest: +SKIP
        '/home/me/.cache/hf-ralm'
    """
    for variable in ("HF_HOME", "XDG_CACHE_HOME"):
        if os.environ.get(variable):
            return os.path.join(os.environ[variable], "hf-ralm")
    return os.path.join(os.path.expanduser("~"), ".cache", "hf-ralm")


def default_index_dir(retriever: str, corpus: str | Sequence[str] | None, words_per_passage: int) -> str:
    """Where ``retriever``'s index of ``corpus`` goes when no folder is given: ``<cache>/indexes/<retriever>-<corpus
    fingerprint[:16]>``, so the same corpus files (and passage size) find their index again. Says where on stderr.

    Example:
        >>> default_index_dir("bm25", "wiki.jsonl.gz", 100)                # doctest: +SKIP
        '/home/me/.cache/hf-ralm/indexes/bm25-3f1c0e9a7b2d4c11'
    """
    if corpus is None:
        raise ValueError(
            f"The {retriever} retriever needs an index folder (index_dir=, --index-dir), or a corpus (corpus=, "
            f"--corpus) to build its index in {os.path.join(hf_ralm_cache_dir(), 'indexes')}."
        )
    fingerprint = corpus_fingerprint(corpus_files(corpus), words_per_passage)
    path = os.path.join(hf_ralm_cache_dir(), "indexes", f"{retriever}-{fingerprint[:16]}")
    print(f"hf-ralm: the {retriever} index is in {path}", file=sys.stderr, flush=True)
    return path


def path_for_folder(path: str, folder: str) -> str:
    """How a file saved in ``folder`` records ``path``: relative to ``folder`` when it lies inside it (the folder can
    then be moved), absolute otherwise. :func:`resolve_path` reads it back."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.relpath(path, folder) if os.path.commonpath([path, folder]) == folder else path


def resolve_path(path: str, folder: str | None) -> str:
    """A path recorded by :func:`path_for_folder` in a file of ``folder`` (``None``: relative to the working
    directory)."""
    return path if folder is None or os.path.isabs(path) else os.path.join(folder, path)


def copy_index(index_dir: str, target: str) -> str:
    """Copy the index folder ``index_dir`` to ``target`` (replacing what is there, through ``<target>.tmp`` so an
    interrupted copy leaves no half index) unless it is already there; returns ``target``."""
    if os.path.realpath(index_dir) != os.path.realpath(target):
        tmp_dir = start_build(target)
        shutil.copytree(index_dir, tmp_dir, dirs_exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp_dir, target)
    return target
