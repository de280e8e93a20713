"""hf-ralm's output folders: it writes only into a missing or empty folder, or one of its own, so it never writes
over, through, mixes with or deletes what it did not write.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Sequence

from ..errors import OutputFolderError, setting
from ..utils.atomic import TMP_PREFIX as ATOMIC_TMP_PREFIX
from ..utils.outputs import OUTPUT_FOLDER_PURPOSE, check_no_links, check_writable


def check_output_folder(folder: str | os.PathLike, own: Sequence[str], what: str, name: str = "output_dir") -> None:
    """Refuse a folder that holds anything but hf-ralm's own files for ``what``, or a symbolic link among them.

    hf-ralm writes only into a missing or empty folder, or one of its own, so it never writes over, through, mixes
    with or deletes what it did not write.

    Args:
        folder: The output folder (missing is fine).
        own: Glob patterns of what hf-ralm writes there (its temporary files are always allowed).
        what: What hf-ralm keeps there, in the message.
        name: The setting that gave the folder, in the message.

    Raises:
        OutputFolderError: A file where the folder should be, an unwritable folder, files of others (a few of them
            named) or a link.

    Examples:
        >>> import tempfile
        >>> check_output_folder(tempfile.mkdtemp(), ("eval.json", "windows"), "evaluation results")  # empty: fine
    """
    folder = Path(folder)
    check_writable(folder, setting(name), OUTPUT_FOLDER_PURPOSE)  # a file there, or under it; read-only
    if not folder.is_dir():
        return
    others = sorted(name for name in os.listdir(folder)
                    if not any(fnmatch.fnmatchcase(name, pattern) for pattern in (*own, ATOMIC_TMP_PREFIX + "*")))
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise OutputFolderError(
            f"{folder} holds files hf-ralm did not write ({shown}), where it would keep its {what}: give a new or "
            f"empty {setting(name)}, or one that holds only hf-ralm's own {what} (it never writes over or "
            "deletes files of others).")
    check_no_links(folder, os.listdir(folder), f"remove the link, or give another {setting(name)}")
