"""The paths a saved or downloaded folder records, followed only inside it: a folder is no way to make hf-ralm open,
build or delete anything elsewhere.

A retriever saved with ``save_pretrained`` records its index folder relative to the saved folder when it lies inside it
(``path_for_folder``), so that folder can be moved or pushed to the Hub. A path read from a saved or downloaded folder
is followed only inside it (``saved_path``: the corpus files and forbidden titles of a saved retriever, a saved RALM's
reranker; ``leads_outside``, also what the list of files in ``hf_ralm_index.json`` is held to). The one exception is
read only: an index saved outside the folder on this machine is opened there when it is still the index it was saved
with (``recorded_index_dir`` records its identity, ``saved_index_dir`` follows it).

Examples:
    >>> leads_outside("index", "saved"), leads_outside("../wiki-bm25", "saved")
    (False, True)
"""

from __future__ import annotations

import hashlib
import json
import os

from ..errors import SavedFolderError
from ..utils.paths import looks_local
from .index_manifest import read_manifest


def _within(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def path_for_folder(path: str, folder: str) -> str:
    """How a file saved in ``folder`` records ``path``: relative to ``folder`` when it lies inside it (the folder can
    then be moved), absolute otherwise (which ``saved_path`` refuses to follow: the caller must give it; an index folder
    is followed on the machine where it was saved, ``saved_index_dir``). ``saved_path`` reads it back."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.relpath(path, folder) if _within(path, folder) else path


def leads_outside(path: str, folder: str, follow_last: bool = True) -> bool:
    """Whether ``path``, as a file of ``folder`` records it, names something outside ``folder``: an absolute path, one
    that climbs out with ``..``, or one through a symbolic link that leads out.

    Args:
        path: the recorded path.
        folder: the folder whose file records it.
        follow_last: follow a link in the path's last part too (``False`` for the files of a Hub download, which are
            links into the cache's blobs).

    Returns:
        Whether it leads outside.

    Examples:
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
    rather than looked up by name: it looks like a path (``looks_local``, in ``hf_ralm.utils.paths``) or one is
    there."""
    return looks_local(name) or os.path.exists(name)


FOLLOWED_ONLY_INSIDE = "hf-ralm follows the paths of a saved or downloaded folder only inside it"
"""Why a path that leads out of a saved folder is not followed, unless the caller says more
(``outside_folder_error``)."""


def outside_folder_error(folder: str, file: str, key: str, path: str, fix: str,
                         *, why: str = FOLLOWED_ONLY_INSIDE) -> SavedFolderError:
    """The error for a path (``key`` in ``file`` of the saved or downloaded ``folder``) that leads out of the folder:
    which file, which key, the path, ``why`` it is not followed, and ``fix``, how to go on."""
    return SavedFolderError(f"{os.path.join(folder, file)}: its {key} {path!r} leads outside {folder!r}, and {why}: "
                            f"{fix}")


def saved_path(path: str, folder: str, file: str, key: str, fix: str) -> str:
    """``path``, recorded in a file of a saved (or downloaded) folder by ``path_for_folder``, joined to the folder: a
    folder from elsewhere (a Hub repository) must not make hf-ralm open, build or delete anything outside it.

    Args:
        path: the recorded path.
        folder: the saved folder.
        file: the file of ``folder`` that records it.
        key: the key it is recorded under.
        fix: how to go on, for the error.

    Returns:
        ``path`` joined to ``folder``.

    Raises:
        SavedFolderError: ``path`` leads outside ``folder`` (``leads_outside``); the message says ``fix``.

    Examples:
        ```python
        saved_path("index", "my-ralm", "retriever_config.json", "index_dir", "...")   # 'my-ralm/index'
        ```
    """
    if leads_outside(path, folder):
        raise outside_folder_error(folder, file, key, path, fix)
    return os.path.join(folder, path)


SAVED_INDEX_IDENTITY = "index_identity"
"""The key of a saved retriever's description (``retriever_config.json``) that holds the identity (``index_identity``)
of an index folder it records outside the saved folder, by its absolute path: what ``saved_index_dir`` recognises that
index by on the machine where it was saved."""


def index_identity(index_dir: str) -> dict | None:
    """What recognises the index in ``index_dir`` when it is looked at again.

    Args:
        index_dir: the index folder.

    Returns:
        Its retriever, the fingerprint of its corpus and a digest of the files (names and sizes) its
            ``hf_ralm_index.json`` lists; ``None`` for a folder without a valid ``hf_ralm_index.json`` or one that
            records no corpus fingerprint (nothing to recognise it by).

    Examples:
        ```python
        index_identity("wiki-bm25")   # {'retriever': 'bm25', 'fingerprint': 'e0b8cc01...', 'files': '5c1f...'}
        ```
    """
    info, _ = read_manifest(index_dir)
    if info is None or not info.get("fingerprint"):
        return None
    files = json.dumps(sorted((info.get("files") or {}).items()))
    return {"retriever": info.get("retriever"), "fingerprint": info["fingerprint"],
            "files": hashlib.sha256(files.encode("utf-8")).hexdigest()[:16]}


def recorded_index_dir(index_dir: str, folder: str) -> dict:
    """How a retriever saved in ``folder`` records its index folder ``index_dir``.

    Args:
        index_dir: the index folder.
        folder: the saved folder.

    Returns:
        ``index_dir`` as ``path_for_folder`` writes it and, for an index outside ``folder``, its identity
            (``index_identity``) under ``SAVED_INDEX_IDENTITY``, by which ``saved_index_dir`` recognises it on this
            machine.

    Examples:
        ```python
        recorded_index_dir("wiki-bm25", "my-ralm")   # {'index_dir': '/data/wiki-bm25', 'index_identity': {...}}
        ```
    """
    recorded = path_for_folder(index_dir, folder)
    identity = index_identity(index_dir) if os.path.isabs(recorded) else None
    return {"index_dir": recorded, **({SAVED_INDEX_IDENTITY: identity} if identity else {})}


def is_hub_download(folder: str) -> bool:
    """Whether ``folder`` was downloaded from the Hub: a snapshot in a Hugging Face cache
    (``.../models--OWNER--NAME/snapshots/REVISION``, what ``snapshot_download`` returns) or a folder that
    ``hf download --local-dir`` filled (it keeps ``.cache/huggingface`` inside).

    Examples:
        >>> is_hub_download("/cache/hub/models--me--ralm/snapshots/0123abcd"), is_hub_download("/data/my-ralm")
        (True, False)
    """
    parts = os.path.realpath(folder).split(os.sep)
    in_cache = any(part.startswith(("models--", "datasets--", "spaces--")) and parts[i + 1:i + 2] == ["snapshots"]
                   for i, part in enumerate(parts))
    return in_cache or os.path.isdir(os.path.join(folder, ".cache", "huggingface"))


def saved_index_dir(recorded: str, identity, folder: str, file: str, fix: str, *, may_follow: bool) -> str:
    """The index folder recorded as ``recorded`` on this machine: inside ``folder``, joined to it; outside it, its
    absolute path, followed to be read only, when ``folder`` was saved here (not downloaded from the Hub:
    ``is_hub_download``), ``may_follow`` and that folder holds the index of the ``identity`` recorded when it was saved
    (``index_identity``). A folder from elsewhere never makes hf-ralm open anything outside it, and nothing ever builds
    or deletes there.

    Args:
        recorded: the index folder as ``recorded_index_dir`` wrote it, under ``index_dir`` in ``file``.
        identity: the identity recorded beside it (``None`` when none was).
        folder: the saved or downloaded folder.
        file: its file that records the index folder.
        fix: how to go on, for the error.
        may_follow: whether a folder outside may be followed (no corpus given that would build there).

    Returns:
        The index folder's path.

    Raises:
        SavedFolderError: the recorded folder leads outside ``folder`` and may not be followed; the message says why and
            ``fix``.

    Examples:
        ```python
        saved_index_dir("index", None, "my-ralm", "retriever_config.json", "...", may_follow=True)  # 'my-ralm/index'
        ```
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
    raise outside_folder_error(folder, file, "index_dir", recorded, fix, why=why)
