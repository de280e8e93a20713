"""An index folder's manifest, ``hf_ralm_index.json``: its name and the one reading of it, checked before anything reads
it.

The manifest records the retriever, the corpus files, their fingerprint (``corpus_fingerprint``, in
``hf_ralm.retrieval.corpus``), the passage size, the number of passages, the backend's settings and the size and SHA-256
digest of every file (``hf_ralm.retrieval.index_checks``). ``read_manifest`` gives it with the reason it is invalid, if
it is (no JSON object, a key hf-ralm reads of another type: ``MANIFEST_SCHEMA``); whether the folder's files match it is
``hf_ralm.retrieval.index_folder``'s question.

Examples:
    ```python
    read_manifest("wiki-bm25").info["num_passages"]   # 666157
    ```
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

from .index_checks import DIGEST_KEY

INDEX_FILE = "hf_ralm_index.json"


class Manifest(NamedTuple):
    """An index folder's ``hf_ralm_index.json`` as ``read_manifest`` read it.

    Attributes:
        info: the parsed ``hf_ralm_index.json`` (``None`` when there is none or it is invalid).
        problem: why it is invalid (``None`` when it is not), as ``index_problem`` (in
            ``hf_ralm.retrieval.index_folder``) words it ("is damaged: ...").
    """

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
"""The types of the keys of ``hf_ralm_index.json`` that hf-ralm itself reads (a backend's settings are checked by what
they must equal, ``index_problem`` in ``hf_ralm.retrieval.index_folder``); a key may be missing (an older index), not of
another type."""


def _schema_problem(info) -> str | None:
    """What makes the parsed ``hf_ralm_index.json`` ``info`` unusable, or ``None``: it is no JSON object, or a key that
    hf-ralm reads has another type (``MANIFEST_SCHEMA``; ``corpus`` a list of paths, ``files`` an object of file names
    and sizes in bytes, ``sha256`` of file names and hex digests)."""
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
    """The ``hf_ralm_index.json`` of an index folder, checked (``_schema_problem``) before anything reads it.

    Args:
        index_dir: the index folder.

    Returns:
        The ``Manifest``: ``(None, None)`` when the folder holds none.
    """
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
