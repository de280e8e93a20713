"""The one skip-or-fail rule of the tests: a test that needs something missing (a real model, a shared data file, an
optional extra) skips, unless the environment variable ``HF_RALM_REQUIRE_<WHAT>`` is on, where it fails, so that CI
never counts a skipped test as a pass. On means set to anything but an empty value, ``0``, ``false``, ``no`` or
``off`` (in any case): ``HF_RALM_REQUIRE_MODELS=1``, ``HF_RALM_REQUIRE_LUCENE=yes``.

The requirements: ``MODELS`` (the real models and the shared data files), ``DENSE``, ``LUCENE``, ``LM_EVAL`` and
``VLLM`` (the extras' packages)."""

from __future__ import annotations

import importlib.util
import os
from typing import NoReturn

import pytest

OFF = ("", "0", "false", "no", "off")
"""The values of ``HF_RALM_REQUIRE_<WHAT>`` that leave a missing requirement a skip (as an unset variable does)."""


def variable(what: str) -> str:
    """The environment variable that makes ``what`` (``MODELS``, ``DENSE``, ...) required."""
    return f"HF_RALM_REQUIRE_{what}"


def required(what: str) -> bool:
    """Whether ``HF_RALM_REQUIRE_<WHAT>`` is on: a missing ``what`` then fails the test instead of skipping it."""
    return os.environ.get(variable(what), "").strip().lower() not in OFF


def skip_or_fail(message: str, what: str) -> NoReturn:
    """Skip the test, saying ``message`` (what is missing and how to get it), or fail it when ``what`` is
    :func:`required`."""
    if required(what):
        pytest.fail(f"{message}; {variable(what)} is on, which requires it")
    pytest.skip(message)


def require_modules(what: str, install: str, *modules: str) -> None:
    """Skip or fail (:func:`skip_or_fail`) unless the packages ``modules`` are installed; ``install`` says how."""
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        skip_or_fail(f"needs {', '.join(missing)} ({install})", what)
