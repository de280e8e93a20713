"""``hf-ralm index``: build (or reuse) an index of a corpus ([`build_index`][hf_ralm.retrieval.build_index]), or, with
``--verify DIR``, check every file of an index against the checksum recorded when it was built
([`verify_index`][hf_ralm.retrieval.verify_index]). The options of a backend's build are the flags its
``BuildOptions`` declares ([`index_flag`][hf_ralm.retrieval.index_flag]), listed under the backends that take
them: a backend registered from outside hf-ralm brings its own."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import asdict

from .common import fail, parent, print_json

NAME = "index"
REQUIRED: tuple[str, ...] = ()
"""The flags this command cannot run without (checked before anything loads)."""

HELP = "build a BM25, Lucene, dense or hybrid index from a corpus, or verify one (--verify DIR)"

_KINDS = {"int": int, "float": float}
"""The types a build option's flag converts its value to, by the field's annotation (a ``str`` needs none)."""


def build_flags() -> dict[str, tuple[dataclasses.Field, list[str]]]:
    """Every registered backend's build options as ``hf-ralm index`` offers them: flag → (the
    [`index_flag`][hf_ralm.retrieval.index_flag] field, the backends that declare it), in the order of the
    backends and of their fields; read now, without importing any backend (a backend may have been registered since).

    Examples:
        >>> flags = build_flags()
        >>> list(flags)[:2], flags["--faiss-factory"][1]
        (['--encoder', '--pooling'], ['dense', 'hybrid'])
    """
    from ..retrieval.declarations import flag_name, index_flags
    from ..retrieval.registry import retriever_declaration, retriever_names

    flags: dict[str, tuple[dataclasses.Field, list[str]]] = {}
    for name in retriever_names()[1:]:
        for field in index_flags(retriever_declaration(name).build_options):
            flags.setdefault(flag_name(field), (field, []))[1].append(name)
    return flags


def _flag_options(field: dataclasses.Field) -> dict:
    """``add_argument``'s keyword arguments for a build option's flag: its help and choices, its type by the field's
    annotation (a ``bool`` is a switch), and no default (a flag not given leaves the backend's own)."""
    from ..retrieval.declarations import INDEX_FLAG

    declared = field.metadata[INDEX_FLAG]
    annotation = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    kind = annotation.split(" | ")[0]  # "int | None", or int itself where annotations are not postponed
    options = {"default": None, "help": declared["help"].replace("%", "%%")}
    if kind == "bool":
        options["action"] = "store_true"
    elif kind in _KINDS:
        options["type"] = _KINDS[kind]
    if declared["choices"] is not None:
        options["choices"] = list(declared["choices"])
    return options


def add_parser(sub) -> None:
    from ..retrieval.corpus import WORDS_PER_PASSAGE
    from ..retrieval.registry import retriever_names

    parser = sub.add_parser(NAME, help=HELP, parents=[parent("workers")])  # the workers of a dense index's encoding
    parser.add_argument("--corpus", action="append", help="JSONL/JSONL.gz/TSV corpus; may repeat (required to build)")
    parser.add_argument("--verify", metavar="DIR",
                        help="check every file of the index in DIR against the SHA-256 checksum recorded when it was "
                             "built (exit status 2 naming a damaged file); builds nothing")
    parser.add_argument("--index-dir", help="where the index goes (default: a folder in hf-ralm's cache, printed)")
    parser.add_argument("--retriever", default="bm25", choices=retriever_names()[1:])
    parser.add_argument("--words-per-passage", type=int, default=WORDS_PER_PASSAGE,
                        help="0 keeps rows as passages (default %(default)s)")
    groups: dict[tuple[str, ...], argparse._ArgumentGroup] = {}
    for flag, (field, backends) in build_flags().items():
        if flag in parser._option_string_actions:
            raise ValueError(f"The {' and '.join(backends)} retriever's build option {field.name!r} would be "
                             f"{flag}, a flag hf-ralm index has already: name the option otherwise.")
        title = f"{' and '.join(backends)} index options"
        group = groups.get(tuple(backends)) or groups.setdefault(tuple(backends), parser.add_argument_group(title))
        group.add_argument(flag, **_flag_options(field))


def run(args: argparse.Namespace) -> dict:
    """Build (or reuse) the index in ``--index-dir`` (default: hf-ralm's cache); its folder and size. With
    ``--verify DIR``: what was verified."""
    from ..retrieval.building import build_index
    from ..retrieval.corpus import check_words_per_passage
    from ..retrieval.index_folder import verify_index

    flags = build_flags()
    if args.verify is not None:
        if args.corpus or args.index_dir:
            fail("--verify DIR checks the index in DIR and builds nothing: give it without --corpus and --index-dir.")
        return verify_index(args.verify)
    if not args.corpus:
        fail("--corpus is required to build an index (--verify DIR checks one).")
    foreign = [flag for flag, (field, backends) in flags.items()
               if args.retriever not in backends and getattr(args, field.name) is not None]
    if foreign:
        takes = {backend for flag in foreign for backend in flags[flag][1]}
        fail(f"{', '.join(foreign)}: {'an option' if len(foreign) == 1 else 'options'} of the "
             f"{' and '.join(sorted(takes))} index, not of --retriever {args.retriever}'s: drop "
             f"{'it' if len(foreign) == 1 else 'them'}, or give that --retriever.")
    check_words_per_passage(args.words_per_passage)  # before a build is announced and its folder made
    options = {field.name: getattr(args, field.name) for field, backends in flags.values()
               if args.retriever in backends}
    return asdict(build_index(args.retriever, args.corpus, args.index_dir, words_per_passage=args.words_per_passage,
                              num_shards=args.num_shards, shard_id=args.shard_id, **options))


show = print_json()
