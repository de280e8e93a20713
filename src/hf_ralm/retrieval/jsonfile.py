"""Writing JSON files atomically, for every file hf-ralm writes (retrieval files, configs, reports).

Example:
    >>> write_json_atomic("out/eval.json", {"token_ppl": 23.2})     # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import tempfile


def write_json_atomic(path: str, data) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it, so a crash never leaves a truncated file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
