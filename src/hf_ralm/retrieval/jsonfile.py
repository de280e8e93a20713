"""Writing files atomically, for every file hf-ralm writes (retrieval files, configs, reports) and the benchmarks'
CSVs.

Example:
    >>> write_json_atomic("out/eval.json", {"token_ppl": 23.2})     # doctest: +SKIP
    >>> write_text_atomic("out/points.csv", "stride,token_ppl\\n4,15.1\\n")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import tempfile


def write_text_atomic(path: str, text: str, suffix: str = ".tmp") -> None:
    """Write ``text`` to a temporary file beside ``path``, flush it to disk (fsync) and rename it over ``path``, so a
    crash leaves either the old file or the new one, never a truncated one."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_json_atomic(path: str, data) -> None:
    """Write JSON atomically (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n", suffix=".json")
