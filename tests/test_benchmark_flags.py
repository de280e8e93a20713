"""The benchmarks take the RALM settings' flags from the command line's generator
(:func:`hf_ralm.cli.add_ralm_arguments`): no benchmark declares one by hand, so a flag's name, type and help have one
source, while each benchmark keeps its own defaults (its figures depend on them; scripts in docs/ and benchmarks/*/*.sh
call it with them)."""

from __future__ import annotations

import ast
import importlib

import pytest

from hf_ralm.config.settings import SETTING_FLAGS
from test_benchmarks_surface import BENCHMARKS, benchmark_files

SETTING_OF_FLAG = {flag.flag: name for name, flag in SETTING_FLAGS.items()}

OTHER_MEANINGS = {
    ("speed/bench_encoder_dtype.py", "--num-passages"):
        "the passages encoded per measurement, not the passages in context",
    ("figures/retrievers.py", "--query-length"): "KIND=ℓ, given once per retriever kind: a query length for each",
}
"""The benchmark flags spelt like a RALM setting's flag that are another thing (a contract: kept as they are)."""


def hand_declared(source: str) -> list[tuple[int, str]]:
    """``(line, flag)`` of each ``add_argument`` call in ``source`` that declares a RALM setting's flag."""
    return [(node.lineno, arg.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
            for arg in node.args if isinstance(arg, ast.Constant) and arg.value in SETTING_OF_FLAG]


def test_no_benchmark_declares_a_ralm_setting_flag_by_hand():
    declared = {(path.relative_to(BENCHMARKS).as_posix(), flag): line for path in benchmark_files()
                for line, flag in hand_declared(path.read_text(encoding="utf-8"))}
    by_hand = [f"benchmarks/{path}:{line}: declares {flag} by hand: add it with hf_ralm.cli.add_ralm_arguments(parser, "
               f"settings=[{SETTING_OF_FLAG[flag]!r}], defaults=...)"
               for (path, flag), line in declared.items() if (path, flag) not in OTHER_MEANINGS]
    assert not by_hand, "\n".join(by_hand)
    assert set(OTHER_MEANINGS) <= set(declared), "OTHER_MEANINGS lists a flag no benchmark declares now: remove it"


def test_the_check_finds_each_flag_declared_by_hand():
    source = ("parser.add_argument('--max-doc-tokens', type=int, default=256)\n"
              "parser.add_argument('--max-lengths', type=int, nargs='+')\n"  # a sweep flag of its own: not a setting's
              "group.add_argument('--stride', type=int)\n")
    assert hand_declared(source) == [(1, "--max-doc-tokens"), (3, "--stride")]


INF = float("inf")


@pytest.mark.parametrize("script, argv, defaults", [
    ("speed.bench_speed", [], {"max_length": 512, "stride": 4, "query_length": 32, "max_doc_tokens": 256}),
    ("speed.bench_generate", [], {"max_length": 512, "stride": 4, "query_length": 32, "max_doc_tokens": 256,
                                  "gate_threshold": 0.25}),
    ("speed.bench_rerank", [], {"max_length": 512, "stride": 4, "query_length": 32, "rerank_candidates": 16,
                                "rerank_tokens": 16}),
    ("speed.bench_lucene_parity", [], {"max_length": 512, "stride": 4, "query_length": 32}),
    ("speed.bench_shards", ["--workers", "2"], {"max_length": 512, "max_doc_tokens": 256}),
    ("tables.gate_tables", [], {"max_context_doc_tokens": 384, "ensemble_temperature": [1.0, 4.0, 16.0, INF]}),
])
def test_a_benchmark_keeps_its_flags_and_defaults(script, argv, defaults):
    """Given nothing, each setting is the benchmark's own default; given, each flag (spelt as before) converts to the
    setting's type, a sweep taking several values."""
    parse_args = importlib.import_module(f"benchmarks.{script}").parse_args
    args = parse_args(argv)
    assert {name: getattr(args, name) for name in defaults} == defaults
    given = {name: [2.0, 8.0] if isinstance(value, list) else value * 2 for name, value in defaults.items()}
    flags = [arg for name, value in given.items()
             for arg in (f"--{name.replace('_', '-')}", *map(str, value if isinstance(value, list) else [value]))]
    typed = parse_args(argv + flags)
    assert {name: getattr(typed, name) for name in given} == given
    assert all(type(getattr(typed, name)) is type(value) for name, value in given.items())
