"""The layers of docs/architecture.md are the ones the code has: every module of hf_ralm belongs to exactly one layer
of the document's table, and imports (at the top of a module or inside a function alike) only modules of its own
layer or of layers below it. Data flows one way: text → tokens → windows → queries → passages → chosen passages →
model inputs → scores."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "src" / "hf_ralm"
DOC = REPO_ROOT / "docs" / "architecture.md"


def layers() -> dict[str, int]:
    """``{module pattern: layer}`` from the document's layer table (``| N | name | `a`, `b/*` | ...``)."""
    table: dict[str, int] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\|\s*(\d+)\s*\|[^|]*\|([^|]*)\|", line)
        if match:
            for pattern in re.findall(r"`([^`]+)`", match.group(2)):
                table[pattern] = int(match.group(1))
    return table


def module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        names.append("/".join(parts))
    return names


def layer_of(module: str, table: dict[str, int]) -> int:
    """The layer of a module path relative to the package (``selection/policy``); a package's ``__init__`` is in its
    package's layer unless the table names it."""
    if module in table:
        return table[module]
    matches = [layer for pattern, layer in table.items()
               if pattern.endswith("/*") and module.startswith(pattern[:-1])]
    if len(matches) != 1:
        raise AssertionError(f"{module} is in {len(matches)} layers of {DOC.name}'s table: name it in exactly one")
    return matches[0]


def imported_modules(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """``(line, module path relative to the package)`` of every hf_ralm module the module at ``path`` (with
    ``source``, by default its file's) imports."""
    here = list(path.relative_to(PACKAGE).with_suffix("").parts)
    package = here[:-1]
    found = []
    for node in ast.walk(ast.parse(source if source is not None else path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "hf_ralm":
                target = node.module.split(".")[1:]
            else:
                continue
            candidates = [target + [alias.name] for alias in node.names] + [target]
        elif isinstance(node, ast.Import):
            candidates = [alias.name.split(".")[1:] for alias in node.names if alias.name.split(".")[0] == "hf_ralm"]
        else:
            continue
        for parts in candidates:  # `from .selection import policy` names a module; `from .plan import prepare` not
            module = "/".join(parts)
            if not module:  # the package itself (`from . import __version__`)
                found.append((node.lineno, "__init__"))
                break
            if (PACKAGE / f"{module}.py").is_file() or (PACKAGE / module / "__init__.py").is_file():
                found.append((node.lineno, module if (PACKAGE / f"{module}.py").is_file() else f"{module}/__init__"))
                break
    return found


def test_every_module_has_one_layer():
    table = layers()
    assert sorted(set(table.values())) == list(range(10)), "the document's layer table was not found whole"
    for module in module_names():
        layer_of(module, table)


def test_every_row_of_the_layer_table_names_modules_that_exist():
    """A pattern of the table that matches no module (a file moved or renamed) is a stale row: the check above would
    pass without it."""
    modules = module_names()
    stale = [pattern for pattern in layers()
             if not any(module == pattern or (pattern.endswith("/*") and module.startswith(pattern[:-1]))
                        for module in modules)]
    assert stale == []


def upward_imports(path: Path, table: dict[str, int], source: str | None = None) -> list[str]:
    """The imports of the module at ``path`` from a higher layer than its own."""
    module = "/".join(path.relative_to(PACKAGE).with_suffix("").parts)
    return [f"{module}.py:{line} imports {target} (layer {layer_of(target, table)} above {layer_of(module, table)})"
            for line, target in imported_modules(path, source) if layer_of(target, table) > layer_of(module, table)]


def test_modules_import_only_their_layer_and_below():
    table = layers()
    upward = [problem for path in sorted(PACKAGE.rglob("*.py")) if path != PACKAGE / "__init__.py"
              for problem in upward_imports(path, table)]  # the package's face re-exports the front ends
    assert not upward, "\n".join(upward)


def test_the_check_catches_an_upward_import():
    """An import from a higher layer is caught, also one inside a function."""
    path = PACKAGE / "core" / "windows.py"
    leaking = path.read_text(encoding="utf-8") + "\n\ndef _leak():\n    from ..evaluation.pipeline import evaluate\n"
    assert upward_imports(path, layers()) == []
    assert [problem.split(" (")[0] for problem in upward_imports(path, layers(), leaking)] == [
        f"core/windows.py:{len(leaking.splitlines())} imports evaluation/pipeline"]


FLOW = [("core/windows", "core/plan"), ("core/plan", "evaluation/pipeline"), ("core/model_inputs", "core/scoring"),
        ("core/scoring", "selection/policy"), ("core/perplexity", "evaluation/pipeline"),
        ("selection/policy", "evaluation/pipeline"), ("selection/policy", "generation/decoder"),
        ("runs/harness", "evaluation/pipeline"), ("evaluation/pipeline", "cli/eval_lm"),
        ("selection/rules", "reranker_training/training"),
        ("selection/strategies/registry", "selection/policy")]
"""Steps of the flow, each before one that uses it: windows, the plan, model inputs, scores, the choice of passages,
the figures, the run's driver and the front end."""


@functools.lru_cache(maxsize=None)
def module_imports() -> dict[str, frozenset[str]]:
    """``{module: the modules it imports}`` for every module of hf_ralm, every import counted (at the top, inside
    functions and under ``TYPE_CHECKING`` alike)."""
    return {"/".join(path.relative_to(PACKAGE).with_suffix("").parts): frozenset(t for _, t in imported_modules(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def import_path(graph: dict[str, frozenset[str]], start: str, goal: str) -> list[str]:
    """A chain of imports from ``start`` to ``goal`` (``start`` first, ``goal`` last), or ``[]`` when ``start``
    reaches ``goal`` through none."""
    before: dict[str, str] = {start: start}
    queue = [start]
    while queue:
        module = queue.pop(0)
        if module == goal:
            chain = [goal]
            while chain[-1] != start:
                chain.append(before[chain[-1]])
            return chain[::-1]
        for target in sorted(graph.get(module, ())):
            if target not in before:
                before[target] = module
                queue.append(target)
    return []


@pytest.mark.parametrize("earlier, later", FLOW)
def test_the_flow_goes_one_way(earlier, later):
    """The code's own imports, followed transitively: the later step uses the earlier one, and the earlier one never
    reaches the later one, not even through a module of its own layer (which the layer check allows)."""
    graph = module_imports()
    assert import_path(graph, later, earlier), f"{later} no longer uses {earlier}: the flow's order is not the code's"
    backwards = import_path(graph, earlier, later)
    assert not backwards, " imports ".join(backwards)


def test_the_flow_check_finds_a_backward_chain():
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset(), "d": frozenset({"a"})}
    assert import_path(graph, "a", "c") == ["a", "b", "c"] and import_path(graph, "c", "a") == []
    assert import_path(graph, "d", "c") == ["d", "a", "b", "c"]


LAZY_FACES = ["__init__", "cli/__init__", "config/__init__", "integrations/__init__", "reranker_training/__init__",
              "retrieval/__init__", "selection/__init__", "utils/__init__"]
"""The package faces whose names are imported when first used (:func:`hf_ralm.utils.lazy.lazy_exports`)."""


def lazy_exports_of(path: Path) -> dict[str, tuple[str, ...]] | None:
    """The submodules and names a package face gives ``lazy_exports`` (a dict literal, or the name of one assigned in
    the face, as ``LAZY_EXPORTS``), or ``None`` for a face that makes none."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assigned = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports":
            exports = node.args[1]
            return ast.literal_eval(assigned[exports.id] if isinstance(exports, ast.Name) else exports)
    return None


def test_lazy_faces_import_only_their_own_layer_and_below():
    """A face whose names are imported when first used (``lazy_exports``, :mod:`hf_ralm.utils.lazy`) names modules of
    its own package, none above its layer: what the import check above cannot see, as no import statement names them."""
    table = layers()
    faces = []
    for path in sorted(PACKAGE.rglob("__init__.py")):
        exports = lazy_exports_of(path)
        if exports is None:
            continue
        face = "/".join(path.relative_to(PACKAGE).parent.parts)
        own = f"{face}/__init__" if face else "__init__"  # the package's own face too (hf_ralm)
        faces.append(own)
        for submodule in exports:
            submodule = submodule.replace(".", "/")
            target = f"{face}/{submodule}" if face else submodule
            target = target if (PACKAGE / f"{target}.py").is_file() else f"{target}/__init__"  # a package
            assert (PACKAGE / f"{target}.py").is_file(), f"{own}.py: no module {target}"
            assert layer_of(target, table) <= layer_of(own, table), (
                f"{own}.py lazily imports {target} (layer {layer_of(target, table)} above {layer_of(own, table)})")
    assert sorted(faces) == LAZY_FACES


def top_level(module: str) -> str:
    """The package (or the module directly under hf_ralm) a module path belongs to."""
    return module.split("/")[0]


def test_each_package_is_one_layer():
    """A folder is a layer: every module of a top-level package is in the same layer of the document's table."""
    table = layers()
    by_package: dict[str, set[int]] = {}
    for module in module_names():
        if module != "__init__":
            by_package.setdefault(top_level(module), set()).add(layer_of(module, table))
    spanning = {package: sorted(found) for package, found in by_package.items() if len(found) > 1}
    assert not spanning, f"packages spanning several layers: {spanning}"


def package_imports() -> dict[str, set[str]]:
    """``{top-level package: the top-level packages its modules import}``, counting every import (at the top, inside
    functions and under ``TYPE_CHECKING`` alike); the package's face (``hf_ralm/__init__.py``) is no package."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue
        here = top_level("/".join(path.relative_to(PACKAGE).with_suffix("").parts))
        graph.setdefault(here, set()).update(
            top_level(target) for _, target in imported_modules(path) if top_level(target) not in (here, "__init__"))
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (its packages in order, the first repeated at the end), or ``[]``."""
    state: dict[str, int] = {}  # 1: on the path being followed, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for after in sorted(graph.get(node, ())):
            if state.get(after) == 1:
                return path[path.index(after):] + [after]
            if after not in state and (found := visit(after)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_import_cycle_between_packages():
    assert cycle(package_imports()) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []


def test_few_modules_at_the_top():
    """The package's top holds its face, its errors and the transformers-style model files; every other module lives in
    the folder of its layer."""
    top = sorted(path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py")
    assert top == ["errors.py", "loading_ralm.py", "model_card.py", "modeling_ralm.py", "saving_ralm.py"]


CONFIG_MODULES = ["__init__", "configuration_ralm", "passage_template", "query_lengths", "settings",
                  "strategy_settings", "window_checks"]
"""config/ holds the settings alone: their defaults, flags and checks, and what the checks need declared (the
retrievers' query lengths, the strategies' names and settings); window arithmetic, passages and the strategies
themselves live with what runs them (core/, selection/)."""


def test_config_holds_the_settings_alone():
    config = sorted(module.split("/", 1)[1] for module in module_names() if module.startswith("config/"))
    assert config == CONFIG_MODULES


MAX_LINES = 600
"""The most lines a source file of hf_ralm has: a file over it holds several jobs."""


def test_no_source_file_is_over_600_lines():
    over = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                  if len(path.read_text(encoding="utf-8").splitlines()) > MAX_LINES)
    assert over == []
