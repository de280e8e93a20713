"""How a run can be reproduced: the command, the code's git commit, the versions that ran it and when.

A long run's settings file records this beside the settings its results depend on. The provenance is never compared
when a run resumes (a resumed run may be started by another command line, on another machine, from another
checkout); the settings are.

Examples:
    >>> info = provenance(["hf-ralm", "rerank-data", "--max-windows", "100"])
    >>> info["command"]
    'hf-ralm rerank-data --max-windows 100'
    >>> sorted(info)
    ['command', 'git_commit', 'git_dirty', 'started', 'versions']
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

_PACKAGES = ("hf-ralm", "torch", "transformers", "sentence-transformers", "bm25s")


def provenance(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """How a run is reproduced, as its records keep it.

    Args:
        argv: the command (by default this process's).

    Returns:
        The command, the git commit of the checkout hf-ralm runs from (``None`` for an installed package;
            ``git_dirty`` when it has uncommitted changes to tracked files), the versions of hf-ralm and the libraries
            results depend on, and the start time (UTC).
    """
    argv = list(sys.argv if argv is None else argv)
    if argv and argv[0].replace("\\", "/").endswith(("/hf-ralm", "hf_ralm/cli/__main__.py")):  # the script or python -m
        argv[0] = "hf-ralm"
    commit, dirty = _git_state(Path(__file__).resolve().parent)
    return {
        "command": shlex.join(argv),
        "git_commit": commit,
        "git_dirty": dirty,
        "versions": {name: _version(name) for name in _PACKAGES},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _git_state(folder: Path) -> tuple[str | None, bool | None]:
    """The HEAD commit of the git checkout holding ``folder`` and whether tracked files differ from it."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
