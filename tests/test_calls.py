"""Public calls stay readable: no public function or method of hf_ralm takes more than five positional parameters
(``self``/``cls`` not counted); what comes after the fifth is keyword-only (``*``), so that a call site names what it
passes (a boolean among eleven positional values says nothing)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "src" / "hf_ralm"
MAX_POSITIONAL = 5


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def long_positional_calls(source: str, module: str) -> list[str]:
    """``module.[Class.]function (n positional)`` for every public function or method of ``source`` (at module level
    or in a public class, nested classes included) that takes more than ``MAX_POSITIONAL`` positional parameters."""
    found = []

    def visit(node: ast.AST, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef) and _public(child.name):
                visit(child, f"{owner}.{child.name}" if owner else child.name)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(child.name):
                positional = [a.arg for a in child.args.posonlyargs + child.args.args]
                if owner and positional[:1] in (["self"], ["cls"]):
                    positional = positional[1:]
                if len(positional) > MAX_POSITIONAL:
                    name = f"{owner}.{child.name}" if owner else child.name
                    found.append(f"{module}.{name} ({len(positional)} positional)")

    visit(ast.parse(source), None)
    return found


def module_name(path: Path) -> str:
    return ".".join(["hf_ralm", *path.relative_to(PACKAGE).with_suffix("").parts]).removesuffix(".__init__")


def test_no_public_call_takes_more_than_five_positional_parameters():
    found = [call for path in sorted(PACKAGE.rglob("*.py"))
             for call in long_positional_calls(path.read_text(encoding="utf-8"), module_name(path))]
    assert found == [], ("make the parameters after the fifth keyword-only (`*`) in: " + "; ".join(found))


def test_the_check_finds_each_kind_of_long_call():
    source = '''
def six(a, b, c, d, e, f): ...
def five_then_keywords(a, b, c, d, e, *, f, g): ...
def _private(a, b, c, d, e, f): ...
class Public:
    def __init__(self, a, b, c, d, e, f): ...
    @classmethod
    def build(cls, a, b, c, d, e): ...
    def method(self, a, b, c, d, e, f=1): ...
    class Inner:
        def __call__(self, a, b, c, d, e, f): ...
class _Private:
    def method(self, a, b, c, d, e, f): ...
'''
    assert long_positional_calls(source, "m") == [
        "m.six (6 positional)", "m.Public.__init__ (6 positional)", "m.Public.method (6 positional)",
        "m.Public.Inner.__call__ (6 positional)"]
