"""Package faces whose names are imported when first used (PEP 562), for faces that would otherwise drag heavy imports
into their package's import: ``hf_ralm`` itself, [`hf_ralm.config`][hf_ralm.config],
[`hf_ralm.retrieval`][hf_ralm.retrieval], [`hf_ralm.selection`][hf_ralm.selection],
[`hf_ralm.reranker_training`][hf_ralm.reranker_training] and [`hf_ralm.integrations`][hf_ralm.integrations] (each module
imports its tool), so that ``import hf_ralm`` and a command's ``--help`` load neither torch nor transformers.

Examples:
    >>> getattr_, dir_ = lazy_exports("json", {"decoder": ("JSONDecodeError",)})
    >>> getattr_("JSONDecodeError").__name__
    'JSONDecodeError'
    >>> "JSONDecodeError" in dir_()
    True
    >>> getattr_("missing")
    Traceback (most recent call last):
    ...
    AttributeError: module 'json' has no attribute 'missing'
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping, Sequence


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> tuple[Callable[[str], Any],
                                                                              Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package ``package`` whose public names ``exports`` lists by
    submodule (``{"candidates": ("score_candidates", ...)}``): a name is imported from ``package.submodule`` the first
    time it is asked for and kept in the package's namespace. Only the package's own submodules can be named, so a
    face re-exports nothing from another package.

    Examples:
        ```python
        __getattr__, __dir__ = lazy_exports(__name__, {"candidates": ("score_candidates",)})
        __all__ = ["score_candidates"]
        ```
    """
    owner = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in owner:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{owner[name]}"), name)
        setattr(sys.modules[package], name, value)  # asked once: later lookups never come back here
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(owner))

    return __getattr__, __dir__
