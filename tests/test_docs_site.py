"""The documentation site as a reader sees it: built once with ``mkdocs build --strict`` (the README's test command),
its pages free of Sphinx markup that mkdocstrings shows as raw text, every dotted ``hf_ralm`` name in the docs, the
README and the docstrings resolving, and a stale cross-reference in a docstring failing the strict build."""

from __future__ import annotations

import ast
import builtins
import functools
import html
import importlib
import inspect
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import griffe
import pytest
import yaml

from conftest import REPO_ROOT

SRC = REPO_ROOT / "src"

# What mkdocstrings does not render but shows as text (each a sign of a docstring written for Sphinx), looked for in
# a page's text outside its code: a role (``:meth:`x``` renders as ":meth:" before the code ``x``), a literal-block
# marker (``Example::``), and a doctest written in an admonition (an ``Example:`` section, whose ``>>>`` Markdown
# reads as three nested quotes; an ``Examples:`` section renders it as code).
RAW_MARKUP = {
    "a Sphinx role": re.compile(r":(?:meth|class|func|mod|attr|data|obj|exc|ref|doc|const|py:[a-z]+):"),
    "a literal-block marker (::)": re.compile(r"\w::(?=[\s\x00]|$)"),
    "a stray backtick": re.compile(r"`"),
}
DOCTEST_AS_QUOTES = re.compile(r"<blockquote>\s*<blockquote>\s*<blockquote>")


def build_site(config: Path, site_dir: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``config`` into ``site_dir``, documenting this checkout's ``src``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site_dir)], capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site, built once per session from the repository's mkdocs.yml (strict: any warning fails it)."""
    site_dir = tmp_path_factory.mktemp("site")
    built = build_site(REPO_ROOT / "mkdocs.yml", site_dir)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return site_dir


def defining_module(identifier: str) -> str:
    """The module whose docstring a heading of the API reference shows: where the object named ``identifier`` (an
    mkdocstrings anchor, e.g. ``hf_ralm.RalmConfig.validate``) or the nearest class or function above it is defined."""
    parts = identifier.split(".")
    end = max(end for end in range(1, len(parts) + 1) if importable(".".join(parts[:end])))
    obj = owner = importlib.import_module(".".join(parts[:end]))
    for part in parts[end:]:
        obj = getattr(obj, part)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            owner = obj
    return owner.__name__ if inspect.ismodule(owner) else inspect.getmodule(owner).__name__


def importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def raw_markup(page: str) -> list[tuple[str, str]]:
    """``(where, what)`` of each piece of raw markup in a built page's article: ``where`` is the module whose
    docstring holds it (by the API heading above it), or ``page`` for the page's own text."""
    article = page[page.find("<article"): page.find("</article>")]
    headings = [(m.start(), m.group(1)) for m in re.finditer(r'<h\d id="(hf_ralm[\w.]*)" class="doc doc-heading"',
                                                             article)]

    def where(position: int) -> str:
        above = [identifier for start, identifier in headings if start < position]
        return defining_module(above[-1]) if above else "page"

    found = [(where(m.start()), "a doctest rendered as quotes") for m in DOCTEST_AS_QUOTES.finditer(article)]
    # the text outside code, each tag kept as a space-free mark so that positions still fall under their heading
    text = re.sub(r"<pre.*?</pre>|<code.*?</code>", lambda m: "\x00" * len(m.group(0)), article, flags=re.S)
    text = re.sub(r"<[^>]+>", lambda m: "\x00" * len(m.group(0)), text)
    for what, pattern in RAW_MARKUP.items():
        found += [(where(m.start()), what) for m in pattern.finditer(text)]
    return found


def test_no_page_shows_raw_markup(site):
    found: dict[str, set[str]] = {}
    for page in sorted(site.rglob("*.html")):
        for where, what in raw_markup(page.read_text(encoding="utf-8")):
            name = f"{page.relative_to(site)}" if where == "page" else where
            found.setdefault(name, set()).add(what)
    assert {name: sorted(whats) for name, whats in found.items()} == {}


def test_the_raw_markup_check_finds_each_kind():
    """The check itself, on a page as mkdocstrings renders each kind under a heading of a converted module."""
    heading = '<article><h2 id="hf_ralm.plan_windows" class="doc doc-heading">plan_windows</h2>'
    cases = {
        "a Sphinx role": "<p>see :func:<code>prepare</code></p>",
        "a literal-block marker (::)": "<p>Example::</p><pre><code>x = 1</code></pre>",
        "a stray backtick": "<p>the `x</p>",
        "a doctest rendered as quotes": "<blockquote>\n<blockquote>\n<blockquote>\n<p>x = 1</p>",
    }
    for what, body in cases.items():
        assert raw_markup(heading + body + "</article>") == [("hf_ralm.core.windows", what)]
    clean = heading + '<p>see <a href="#x"><code>prepare</code></a>: <code>a::b</code></p></article>'
    assert raw_markup(clean) == []


@functools.cache
def python_options() -> dict:
    """The options mkdocs.yml gives mkdocstrings' Python handler (the docstring style and its parser's options among
    them)."""
    return next(plugin["mkdocstrings"] for plugin in
                yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["plugins"]
                if isinstance(plugin, dict) and "mkdocstrings" in plugin)["handlers"]["python"]["options"]


def test_signatures_are_formatted_to_the_configured_width(site):
    """mkdocstrings formats a signature to ``line_length`` when ruff (the docs extra) is installed; without it each
    signature is one line, cut off at the page's edge."""
    options = python_options()
    lines = [line for page in (site / "api").rglob("*.html")
             for signature in re.findall(r'<div class="doc-signature highlight"><pre>(.*?)</pre>',
                                         page.read_text(encoding="utf-8"), flags=re.S)
             for line in html.unescape(re.sub(r"<[^>]+>", "", signature)).splitlines()]
    assert len(lines) > 500
    assert [line for line in lines if len(line) > options["line_length"]] == []


# --------------------------------------------------------------------------------------------------------------
# Sections of items: a line at an item's indentation starts a new item
# --------------------------------------------------------------------------------------------------------------

# mkdocstrings' Google parser (griffe) reads each line of a section that is indented as the section's first item as
# a new item, and only a line indented further as the item's continuation: a Returns or Yields description continued
# on a line not indented further renders as one row per line, each under the return type; in Raises (or Args) such a
# line is a bogus exception or argument (when it starts as one, with a colon) or is dropped, with a warning that
# fails the strict build only where a page renders the docstring. The check below finds all but a bogus argument
# (an Args item may name several parameters at once, which a check against the signature would take for one).
DROPPED_LINE = re.compile(r"Failed to get .* from .*|Confusing indentation for continuation line .*")


def public_objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    """``obj`` and what it defines that the API reference can render: no alias (it renders where it is defined), no
    name mkdocs.yml's filter hides (``_x``), but ``__init__``, whose docstring the class's merges."""
    yield obj
    for name, member in obj.members.items():
        if not member.is_alias and (not name.startswith("_") or name == "__init__"):
            yield from public_objects(member)


def names_an_exception(annotation: str | griffe.Expr) -> bool:
    """Whether a Raises item's ``annotation`` (what precedes its colon) is a dotted name of an exception: a built-in
    one or, as PEP 8 names them, one whose name ends in Error (or Exception, Warning)."""
    if not isinstance(annotation, (griffe.ExprName, griffe.ExprAttribute)):
        return False
    name = str(annotation).rsplit(".", 1)[-1]
    builtin = getattr(builtins, name, None)
    return (isinstance(builtin, type) and issubclass(builtin, BaseException)) or name.endswith(
        ("Error", "Exception", "Warning"))


class Logged(logging.Handler):
    """Keeps the messages logged to it (griffe's parser says so when it drops a line)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def item_sections_misread(obj: griffe.Object) -> list[str]:
    """What mkdocstrings renders amiss in ``obj``'s docstring, parsed as the site parses it (mkdocs.yml's style and
    options): a Returns or Yields section of several items, not all of them named (``name (type): ...``: a description
    of several lines read as one item per line), a Raises item that names no exception (a continued description with
    a colon in it), and a line the parser drops (a continued description without one)."""
    if obj.docstring is None:
        return []
    options = python_options()
    logged = Logged()
    logger = logging.getLogger("griffe")
    logger.addHandler(logged)
    try:
        sections = obj.docstring.parse(options["docstring_style"], **options.get("docstring_options", {}))
    finally:
        logger.removeHandler(logged)
    found = [f"the parser warns: {dropped.group(0)}" for message in logged.messages
             if (dropped := DROPPED_LINE.search(message))]
    for section in sections:
        kind = section.kind.value
        if kind in ("returns", "yields") and len(section.value) > 1 and not all(item.name for item in section.value):
            found.append(f"{kind} in {len(section.value)} rows, the second {section.value[1].description[:40]!r}")
        if kind == "raises":
            found += [f"raises {str(item.annotation)!r}" for item in section.value
                      if not names_an_exception(item.annotation)]
    return found


def test_no_docstring_section_splits_a_description_into_items():
    package = griffe.load("hf_ralm", search_paths=[str(SRC)])
    found = {obj.path: problems for obj in public_objects(package)
             for problems in [item_sections_misread(obj)] if problems}
    assert found == {}, "continue these descriptions on lines indented 4 spaces more:\n" + "\n".join(
        f"{path}: {problem}" for path, problems in found.items() for problem in problems)


def test_the_section_check_finds_each_misread():
    """The check itself, on docstrings that continue each kind of item on a line not indented further, and the same
    continued as the parser reads them."""
    docstring = '''    """Descriptions continued on lines {how}.

    Args:
        x: The x,
        {more}continued.

    Returns:
        The result,
        {more}continued.

    Raises:
        ValueError: When x is bad,
        {more}or: worse.
        RuntimeError: When x is worse, in
        {more}which: case.
    """'''
    code = f'''
def continued(x):
{docstring.format(how="not indented further", more="")}

def indented(x):
{docstring.format(how="indented 4 spaces more", more="    ")}

def yielded():
    """Yielded.

    Yields:
        Each value,
        continued.
    """

def named():
    """Several values, each named, and exceptions that are not called errors.

    Returns:
        count (int): How many.
        name (str): Which.

    Raises:
        StopIteration: At the end.
        hf_ralm.SettingError: Dotted.
    """
'''
    with griffe.temporary_visited_module(code) as module:
        assert item_sections_misread(module["continued"]) == [
            "the parser warns: Failed to get 'name: description' pair from 'continued.'",
            "returns in 2 rows, the second 'continued.'",
            "raises 'or'", "raises 'which'"]
        assert item_sections_misread(module["yielded"]) == ["yields in 2 rows, the second 'continued.'"]
        assert item_sections_misread(module["indented"]) == item_sections_misread(module["named"]) == []


# --------------------------------------------------------------------------------------------------------------
# Dotted names: every hf_ralm.x.y the docs, the README and the docstrings name must exist
# --------------------------------------------------------------------------------------------------------------

DOTTED = re.compile(r"(?<![\w./-])hf_ralm(?:\.[A-Za-z_]\w*)+")


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module of hf_ralm or something in one (its longest importable prefix, then
    attributes)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


def test_every_dotted_name_in_the_docs_and_the_readme_resolves():
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    names = {(str(page.relative_to(REPO_ROOT)), name) for page in pages
             for name in DOTTED.findall(page.read_text(encoding="utf-8"))}
    assert len(names) > 50  # the pages name many: a pattern that found none would pass on nothing
    assert [entry for entry in sorted(names) if not resolves(entry[1])] == []


def test_every_dotted_name_in_a_docstring_resolves():
    """Cross-references in docstrings that no API page renders are not checked by the strict build: here they are,
    with the plain dotted names in their text."""
    names = set()
    for path in sorted((SRC / "hf_ralm").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names |= {(str(path.relative_to(SRC)), name) for name in DOTTED.findall(node.value)}
    assert len(names) > 200
    assert sorted(entry for entry in names if not resolves(entry[1])) == []


def test_the_faces_the_architecture_names_are_the_public_ones():
    """docs/architecture.md named a face ``selection.strategies`` that did not exist: its list is the benchmarks'
    faces (tests/test_benchmarks_surface.py), each a package that imports."""
    from test_benchmarks_surface import FACES

    text = " ".join((REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split())
    listed = re.search(r"The public surface is `hf_ralm` and the faces of its subpackages \(([^)]*)\)", text).group(1)
    faces = {f"hf_ralm.{name}" for name in re.findall(r"`([\w.]+)`", listed)}
    assert faces == set(FACES) - {"hf_ralm"}
    assert all(importable(face) for face in faces)


def test_resolves_tells_a_stale_name():
    assert resolves("hf_ralm.core.plan.window_length") and resolves("hf_ralm.RalmConfig.validate")
    assert not resolves("hf_ralm.core.model_inputs.window_length")
    assert not resolves("hf_ralm.selection.strategies.SCORED_PASS")


# --------------------------------------------------------------------------------------------------------------
# The strict build fails on a stale cross-reference
# --------------------------------------------------------------------------------------------------------------

def small_site(tmp_path: Path, reference: str) -> Path:
    """A one-page site with the repository's mkdocs.yml settings (theme, mkdocstrings' options, strict), rendering
    a function whose docstring cross-references ``reference``, and ``hf_ralm.count_words`` for a reference to land
    on."""
    (tmp_path / "pkg").mkdir(parents=True)
    (tmp_path / "pkg" / "stale_reference.py").write_text(
        f'def described():\n    """Counted as [`count_words`][{reference}] counts."""\n', encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# API\n\n::: stale_reference.described\n\n::: hf_ralm.count_words\n",
                                                encoding="utf-8")
    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            plugin["mkdocstrings"]["handlers"]["python"]["paths"] = [str(tmp_path / "pkg"), str(SRC)]
    config.update(docs_dir=str(tmp_path / "docs"), nav=["index.md"])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return tmp_path / "mkdocs.yml"


def test_the_strict_build_fails_on_a_stale_cross_reference(tmp_path):
    assert yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["strict"] is True
    current = build_site(small_site(tmp_path / "current", "hf_ralm.count_words"), tmp_path / "site")
    assert current.returncode == 0, current.stderr
    stale = build_site(small_site(tmp_path / "stale", "hf_ralm.core.model_inputs.window_length"), tmp_path / "site2")
    assert stale.returncode != 0
    assert "Could not find cross-reference target 'hf_ralm.core.model_inputs.window_length'" in stale.stderr
