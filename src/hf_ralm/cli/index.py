"""``hf-ralm index``: build (or reuse) an index of a corpus (:func:`hf_ralm.retrieval.build_index`), or, with
``--verify DIR``, check every file of an index against the checksum recorded when it was built
(:func:`~hf_ralm.retrieval.index_folder.verify_index`)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from .common import ENCODER_HELP, fail, parent, print_json

NAME = "index"
REQUIRED: tuple[str, ...] = ()
"""The flags this command cannot run without (checked before anything loads)."""

HELP = "build a BM25, Lucene, dense or hybrid index from a corpus, or verify one (--verify DIR)"


def add_parser(sub) -> None:
    from ..retrieval.corpus import WORDS_PER_PASSAGE
    from ..retrieval.dense_options import DEFAULT_FACTORY, ENCODER_DTYPES, POOLINGS
    from ..retrieval.registry import RETRIEVER_NAMES

    parser = sub.add_parser(NAME, help=HELP, parents=[parent("workers")])  # the workers of a dense index's encoding
    parser.add_argument("--corpus", action="append", help="JSONL/JSONL.gz/TSV corpus; may repeat (required to build)")
    parser.add_argument("--verify", metavar="DIR",
                        help="check every file of the index in DIR against the SHA-256 checksum recorded when it was "
                             "built (exit status 2 naming a damaged file); builds nothing")
    parser.add_argument("--index-dir", help="where the index goes (default: a folder in hf-ralm's cache, printed)")
    parser.add_argument("--retriever", default="bm25", choices=RETRIEVER_NAMES[1:])
    parser.add_argument("--encoder", help=ENCODER_HELP)
    parser.add_argument("--pooling", choices=POOLINGS, help="dense pooling (default: the encoder's own)")
    parser.add_argument("--encoder-dtype", choices=list(ENCODER_DTYPES),
                        help="the dense encoder's precision, recorded in the index and used for its queries (default: "
                             "an existing index's own, else float32); bfloat16 encoded 1.6x faster on a CPU with bf16 "
                             "instructions (docs/dense.md)")
    parser.add_argument("--faiss-factory", default=DEFAULT_FACTORY,
                        help="faiss index_factory string, e.g. HNSW32 or IVF4096,PQ64 (default Flat: exact search)")
    parser.add_argument("--words-per-passage", type=int, default=WORDS_PER_PASSAGE,
                        help="0 keeps rows as passages (default %(default)s)")


def run(args: argparse.Namespace) -> dict:
    """Build (or reuse) the index in ``--index-dir`` (default: hf-ralm's cache); its folder and size. With
    ``--verify DIR``: what was verified."""
    from ..retrieval.building import build_index
    from ..retrieval.corpus import check_words_per_passage
    from ..retrieval.index_folder import verify_index

    if args.verify is not None:
        if args.corpus or args.index_dir:
            fail("--verify DIR checks the index in DIR and builds nothing: give it without --corpus and --index-dir.")
        return verify_index(args.verify)
    if not args.corpus:
        fail("--corpus is required to build an index (--verify DIR checks one).")
    check_words_per_passage(args.words_per_passage)  # before a build is announced and its folder made
    return asdict(build_index(args.retriever, args.corpus, args.index_dir, words_per_passage=args.words_per_passage,
                              encoder=args.encoder, pooling=args.pooling, faiss_factory=args.faiss_factory,
                              encoder_dtype=args.encoder_dtype, num_shards=args.num_shards, shard_id=args.shard_id))


show = print_json()
