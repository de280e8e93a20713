"""The benchmarks use hf-ralm's documented surface only: every import from hf_ralm in benchmarks/ (at the top of a
module, inside a function, or in the code of a child process held in a string) names a public face (``hf_ralm`` or
one of the subpackages' faces) and only names that face lists in ``__all__``, each documented. Scripts outside the
project can then do what the benchmarks do, and an internal module can move without breaking a benchmark."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"
SOURCE = REPO_ROOT / "src" / "hf_ralm"
FACES = ("hf_ralm", "hf_ralm.retrieval", "hf_ralm.selection", "hf_ralm.config", "hf_ralm.selection.strategies",
         "hf_ralm.generation", "hf_ralm.reranker_training", "hf_ralm.metrics", "hf_ralm.integrations",
         "hf_ralm.testing", "hf_ralm.utils", "hf_ralm.cli")
"""The public faces a benchmark may import from (docs/architecture.md)."""


def benchmark_files() -> list[Path]:
    """Every Python file of benchmarks/ (the committed run records are under results/)."""
    return sorted(BENCHMARKS.rglob("*.py"))


def hf_ralm_imports(source: str, first_line: int = 1) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of each import from hf_ralm in ``source`` (``name`` is ``None`` for ``import
    hf_ralm.x``), including those of code held in string constants (a child process's script), whose lines are
    counted from the string's first line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = first_line + node.lineno - 1 if hasattr(node, "lineno") else first_line
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == "hf_ralm":
            found += [(line, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(line, alias.name, None) for alias in node.names if alias.name.split(".")[0] == "hf_ralm"]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "hf_ralm" in node.value:
            try:
                found += hf_ralm_imports(node.value, line)
            except SyntaxError:  # prose, not code
                pass
    return found


def surface_problems(path: Path, source: str | None = None) -> list[str]:
    """``file:line: what`` for each import of the file at ``path`` (with ``source``, by default the file's) from
    outside the public faces or of a name its face does not list in ``__all__``."""
    where = path.relative_to(REPO_ROOT)
    problems = []
    for line, module, name in hf_ralm_imports(source if source is not None else path.read_text(encoding="utf-8")):
        if module not in FACES:
            problems.append(f"{where}:{line}: imports {module}, which is not a public face: import from one of "
                            f"{', '.join(FACES)}")
        elif name is not None and name not in getattr(importlib.import_module(module), "__all__", ()):
            problems.append(f"{where}:{line}: imports {name} from {module}, which does not list it in __all__: add it "
                            "there (documented) or use a public name")
    return problems


@functools.lru_cache(maxsize=None)
def attribute_docstrings() -> frozenset[str]:
    """The module-level names of hf_ralm that have a docstring (a string right after their assignment)."""
    named = set()
    for path in SOURCE.rglob("*.py"):
        body = ast.parse(path.read_text(encoding="utf-8")).body
        for statement, after in zip(body, body[1:]):
            if (isinstance(statement, (ast.Assign, ast.AnnAssign)) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                named |= {target.id for target in targets if isinstance(target, ast.Name)}
    return frozenset(named)


def test_benchmarks_import_only_public_names():
    files = benchmark_files()
    assert len(files) > 30, "benchmarks/ was not found"
    problems = [problem for path in files for problem in surface_problems(path)]
    assert not problems, "\n".join(problems)


def test_the_check_names_the_file_and_line_of_each_internal_import():
    """Internal modules, names missing from a face's ``__all__`` and a child script's imports are all caught; the
    faces' public names pass."""
    path = BENCHMARKS / "speed" / "bench_speed.py"
    source = ("from hf_ralm import RalmConfig\n"
              "from hf_ralm.selection import rerank_windows, WindowRanker\n"
              "def main():\n"
              "    from hf_ralm.core.scoring import score_windows\n"
              "    import hf_ralm.retrieval.bm25\n"
              "CHILD = '''\n"
              "from hf_ralm.utils.atomic import write_json_atomic\n"
              "'''\n")
    assert [problem.split(",")[0] for problem in surface_problems(path, source)] == [
        "benchmarks/speed/bench_speed.py:2: imports WindowRanker from hf_ralm.selection",
        "benchmarks/speed/bench_speed.py:4: imports hf_ralm.core.scoring",
        "benchmarks/speed/bench_speed.py:5: imports hf_ralm.retrieval.bm25",
        "benchmarks/speed/bench_speed.py:7: imports hf_ralm.utils.atomic",
    ]


def imported_names() -> list[tuple[str, str]]:
    """``(face, name)`` of every name the benchmarks import from hf_ralm's faces."""
    return sorted({(module, name) for path in benchmark_files()
                   for _, module, name in hf_ralm_imports(path.read_text(encoding="utf-8"))
                   if name is not None and module in FACES})


@pytest.mark.parametrize("face, name", imported_names())
def test_what_the_benchmarks_import_is_documented(face, name):
    """Every name the benchmarks import is documented: a docstring of its own (a function or a class), or one under
    its assignment (a constant)."""
    value = getattr(importlib.import_module(face), name)
    if inspect.isfunction(value) or inspect.isclass(value):
        assert inspect.getdoc(value), f"{face}.{name} has no docstring"
    else:
        assert name in attribute_docstrings(), f"{face}.{name} has no docstring under its assignment"


@pytest.mark.parametrize("face", FACES)
def test_every_public_name_of_a_face_is_there(face):
    module = importlib.import_module(face)
    missing = [name for name in getattr(module, "__all__", ()) if not hasattr(module, name)]
    assert not missing, f"{face}.__all__ lists names it does not have: {missing}"


def test_faces_import_their_optional_backends_only_when_used():
    """``import hf_ralm`` and its faces import neither lm-eval's adapter nor the Lucene and hybrid backends; asking a
    face for one of their names imports it."""
    code = ("import sys, hf_ralm, hf_ralm.integrations, hf_ralm.retrieval, hf_ralm.selection\n"
            "lazy = ['hf_ralm.integrations.lm_eval', 'hf_ralm.retrieval.lucene', 'hf_ralm.retrieval.lucene_compat',\n"
            "        'hf_ralm.retrieval.hybrid']\n"
            "print([m for m in lazy if m in sys.modules])\n"
            "hf_ralm.retrieval.HybridRetriever, hf_ralm.retrieval.start_jvm\n"
            "print([m for m in lazy if m in sys.modules])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == [
        "[]", "['hf_ralm.retrieval.lucene_compat', 'hf_ralm.retrieval.hybrid']"]


def test_the_benchmarks_index_lists_every_script():
    """benchmarks/README.md is the index a newcomer reads to know what to run: every script and helper module of
    benchmarks/ (but the package markers) is named there by its path in its folder (``speed/bench_speed.py``), and
    every path the index names in a folder is there (a script moved or removed leaves no stale row)."""
    index = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    scripts = [p.relative_to(BENCHMARKS).as_posix() for p in [*BENCHMARKS.rglob("*.py"), *BENCHMARKS.rglob("*.sh")]
               if p.name != "__init__.py"]
    unlisted = [path for path in sorted(scripts) if f"`{path}`" not in index]
    assert not unlisted, f"benchmarks/README.md does not list {unlisted}"
    named = re.findall(r"`([\w/]+/[\w.]+\.(?:py|sh))`", index)
    missing = [path for path in named if not (BENCHMARKS / path).is_file()]
    assert named and not missing, f"benchmarks/README.md names scripts that are not there: {missing}"


@pytest.mark.parametrize("doc", ["README.md", "benchmarks/README.md", "results/README.md", *sorted(
    p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "docs").rglob("*.md"))])
def test_every_script_a_doc_names_is_there(doc):
    """The commands the docs give name scripts that exist (``python benchmarks/tables/scale_tables.py``,
    ``bash .ci/check_floors.sh``): a script moved to another folder leaves no command behind."""
    text = (REPO_ROOT / doc).read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w/.])((?:benchmarks|\.ci)/[\w/]+\.(?:py|sh))\b", text))
    assert not [path for path in sorted(named) if not (REPO_ROOT / path).is_file()]
