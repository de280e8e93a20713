"""The one skip-or-fail rule (:mod:`_require`): a missing requirement skips unless its ``HF_RALM_REQUIRE_<WHAT>`` is
on, and then fails; every helper of the tests that skips (the real models, the shared data, the extras) goes through
it."""

from __future__ import annotations

import ast

import pytest

from _require import require_modules, required, skip_or_fail
from conftest import REPO_ROOT


@pytest.mark.parametrize("value, on", [(None, False), ("", False), ("0", False), ("false", False), ("No", False),
                                       (" off ", False), ("1", True), ("yes", True), ("true", True), ("2", True)])
def test_a_requirement_is_on_unless_unset_empty_or_off(value, on, monkeypatch):
    if value is None:
        monkeypatch.delenv("HF_RALM_REQUIRE_MODELS", raising=False)
    else:
        monkeypatch.setenv("HF_RALM_REQUIRE_MODELS", value)
    assert required("MODELS") is on
    with pytest.raises(pytest.fail.Exception if on else pytest.skip.Exception) as ended:
        skip_or_fail("model m not found", "MODELS")
    assert str(ended.value).startswith("model m not found")
    assert ("HF_RALM_REQUIRE_MODELS is on" in str(ended.value)) is on


def test_installed_modules_are_no_skip_and_a_missing_one_is_named(monkeypatch):
    monkeypatch.setenv("HF_RALM_REQUIRE_DENSE", "1")
    require_modules("DENSE", "pip install x", "json", "pytest")  # installed: nothing happens
    with pytest.raises(pytest.fail.Exception, match=r"^needs no_such_package_x \(pip install x\); HF_RALM_REQUIRE"):
        require_modules("DENSE", "pip install x", "json", "no_such_package_x")


def test_no_test_skips_or_reads_a_requirement_but_through_the_one_rule():
    """No other ``pytest.skip``, ``pytest.importorskip`` or reading of an ``HF_RALM_REQUIRE_`` variable in tests/, so
    that no second truthiness rule (or a skip that CI would count as a pass) comes back."""
    found = []
    for path in sorted((REPO_ROOT / "tests").glob("*.py")):
        if path.name == "_require.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("skip", "importorskip") and getattr(node.func.value, "id", None) == "pytest":
                found.append(f"{path.name}:{node.lineno} pytest.{node.func.attr}")  # (pytest.mark.skip: a marker)
            if _reads_requirement(node):
                found.append(f"{path.name}:{node.lineno} reads an HF_RALM_REQUIRE_ variable")
    assert found == ALLOWED, found


ALLOWED = ["test_declared_versions.py:18 pytest.importorskip"]
"""tomli on Python 3.10 (the standard library's tomllib since 3.11): a test dependency, no extra to require."""


def _reads_requirement(node: ast.AST) -> bool:
    """Whether ``node`` reads an ``HF_RALM_REQUIRE_`` variable: ``os.environ.get(...)``, ``os.getenv(...)`` or
    ``os.environ[...]`` (setting one, as ``monkeypatch.setenv`` does here, is no reading)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "getenv"):
        key = node.args[0] if node.args else None
    elif isinstance(node, ast.Subscript) and getattr(node.value, "attr", None) == "environ":
        key = node.slice
    else:
        return False
    return isinstance(key, ast.Constant) and str(key.value).startswith("HF_RALM_REQUIRE_")
