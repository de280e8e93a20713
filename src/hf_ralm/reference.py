"""Deprecated: the reference loops live in :mod:`hf_ralm.testing` (``from hf_ralm.testing import
reference_window_nlls``), with the other plain loops the tests hold the fast paths to. This alias stays for code
written against the page that named it (docs/conventions.md) and warns on use."""

from __future__ import annotations

import warnings

from . import testing

MOVED = ("reference_window_nlls", "reference_rerank_nlls")


def __getattr__(name: str):
    if name in MOVED:
        warnings.warn(f"hf_ralm.reference.{name} moved to hf_ralm.testing.{name}: import it from there "
                      "(hf_ralm.reference will be removed).", FutureWarning, stacklevel=2)
        return getattr(testing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
