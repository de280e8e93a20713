"""Telling a local path from a Hugging Face Hub id before anything is fetched, so that a mistyped file fails at once
(not after the Hub client's retries) and a Hub failure says how to stay offline.

Examples:
    >>> looks_local("nope.jsonl"), looks_local("./models/smollm2"), looks_local("HuggingFaceTB/SmolLM2-135M")
    (True, True, False)
    >>> looks_local("wikitext"), looks_local("data/wiki/test")
    (False, True)
"""

from __future__ import annotations

import os

FILE_SUFFIXES = (".json", ".jsonl", ".gz", ".txt", ".tsv", ".csv", ".parquet", ".arrow", ".gguf", ".safetensors",
                 ".bin", ".pt")
"""Endings that only files have: a Hub id never ends in one."""

OFFLINE_HINT = ("no connection to the Hugging Face Hub? Set HF_HUB_OFFLINE=1 to use only what is in the local cache "
                "(and fail at once when it is not there)")


def looks_local(path: str | os.PathLike) -> bool:
    """Whether ``path`` can only mean a local file or folder: it starts like a path (``/``, ``.``, ``~``), ends like a
    file ([`FILE_SUFFIXES`][hf_ralm.utils.paths.FILE_SUFFIXES]), or has more parts than a Hub id's ``owner/name``."""
    text = os.fspath(path)
    if text.startswith(("/", ".", "~")) or text.lower().endswith(FILE_SUFFIXES):
        return True
    return len([part for part in text.replace(os.sep, "/").split("/") if part]) > 2


def missing_local_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` looks local ([`looks_local`][hf_ralm.utils.paths.looks_local]) and is not there: then it must
    not be looked up on the Hub."""
    return looks_local(path) and not os.path.exists(os.path.expanduser(os.fspath(path)))
