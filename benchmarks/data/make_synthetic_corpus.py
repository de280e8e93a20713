"""Make a corpus of the paper's size here (issue 64: its 21M Wikipedia passages cannot reach these machines): the
Wikipedia sample's articles as they are, then generated one-passage articles whose words are drawn from the sample's
own word frequencies and whose lengths from the sample's own passage lengths, up to ``--size`` in all.

    python benchmarks/data/make_synthetic_corpus.py --size 2000000

The sample's articles are cut into passages as every backend cuts them (100 whitespace words,
:func:`~hf_ralm.retrieval.passage_rows`); the words counted are those passages' whitespace words as written (case
and punctuation kept), so a generated passage goes through the same analysis as a real one. A generated article is
``{"id": "synthetic-N", "title": ..., "text": ...}``: its length L drawn from the sample's passage lengths,
its L words drawn independently from the unigram frequencies (a NumPy ``Generator`` seeded by ``--seed``, drawn a
batch of passages at a time, so the file is the same for the same sample, seed and size). Its words are the sample's
own, so they bring no new term; the new terms a larger corpus brings (names, numbers, misspellings) come from the
titles instead: passage n (counted from the corpus's start) is titled ``synthetic s<int(K n^β)>`` with Heaps' law
``V = K n^β`` fitted to the sample's vocabulary (docs/scale-out.md: K = 158.9, β = 0.601, measured by
benchmarks/speed/bench_bm25_build.py), so each title term is a new term, shared by the consecutive passages that the
law gives one new term, and the vocabulary grows as the law projects for the real corpus (about 4.0M terms at 21M
passages; the sample's 516k terms to begin with): the vocabulary's memory is then of the real corpus's size, though
no real posting list is modelled beyond the unigram draws. The corpus is written as it is generated (never held in
memory), gzip level 1, as ``~/.cache/hf-ralm/synthetic/wikipedia-synthetic-<N>.jsonl.gz`` with ``<name>.json``
beside it (the settings and the counts); a file already there with the same settings is kept. Never committed: about
340 MB per million generated passages. The 2M file takes under 2 minutes on the 2-core machine (some 13,000
generated passages a second).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import sys
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from benchmarks.bench_setup import WIKIPEDIA
from hf_ralm.retrieval import passage_rows, read_corpus
from hf_ralm.utils import write_json_atomic

SAMPLE = WIKIPEDIA
OUT_DIR = Path.home() / ".cache" / "hf-ralm" / "synthetic"
HEAPS_K, HEAPS_BETA = 158.9, 0.601  # V = K n^β, fitted to the sample's terms (docs/scale-out.md)
BATCH = 20_000  # generated passages drawn at once (part of what a seed means: the draws are made batch by batch)


def sample_statistics(sample: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The sample's passages' whitespace words (most frequent first), their counts, and each passage's length."""
    words: collections.Counter = collections.Counter()
    lengths = []
    for row in tqdm(passage_rows(read_corpus(str(sample))), desc="Counting the sample's words", unit=" passages"):
        text_words = row["text"].split()
        words.update(text_words)
        lengths.append(len(text_words))
    vocabulary = words.most_common()
    return ([w for w, _ in vocabulary], np.fromiter((c for _, c in vocabulary), dtype=np.int64, count=len(vocabulary)),
            np.asarray(lengths, dtype=np.int32))


def generated_rows(num: int, first: int, words: list[str], counts: np.ndarray, lengths: np.ndarray,
                   rng: np.random.Generator):
    """``num`` generated one-passage articles, numbered from ``first``, as JSONL lines, a batch at a time."""
    vocabulary = np.asarray(words, dtype=object)
    cumulative = np.cumsum(counts)
    for start in range(0, num, BATCH):
        size = min(BATCH, num - start)
        batch_lengths = lengths[rng.integers(0, len(lengths), size=size)]
        # a word drawn with probability count / total: the first word whose cumulative count exceeds a uniform draw
        drawn = np.searchsorted(cumulative, rng.integers(0, cumulative[-1], size=int(batch_lengths.sum())),
                                side="right")
        tokens = vocabulary[drawn].tolist()
        ends = np.cumsum(batch_lengths).tolist()
        numbers = np.arange(first + start, first + start + size)
        title_terms = (HEAPS_K * (numbers + 1.0) ** HEAPS_BETA).astype(np.int64).tolist()  # the vocabulary's size
        begin = 0
        lines = []
        for number, title_term, end in zip(numbers.tolist(), title_terms, ends):
            lines.append(json.dumps({"id": f"synthetic-{number}", "title": f"synthetic s{title_term}",
                                     "text": " ".join(tokens[begin:end])}, ensure_ascii=False) + "\n")
            begin = end
        yield lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, required=True, help="passages in all, the sample's included")
    parser.add_argument("--sample", type=Path, default=SAMPLE, help="the articles whose passages come first")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = corpus_path(args.out_dir, args.size)
    settings = {"sample": str(args.sample.resolve()), "sample_bytes": args.sample.stat().st_size,
                "num_passages": args.size, "seed": args.seed, "batch": BATCH,
                "heaps": [HEAPS_K, HEAPS_BETA]}
    manifest = path.with_suffix("").with_suffix(".json")
    if path.exists() and manifest.exists() and json.loads(manifest.read_text())["settings"] == settings:
        print(f"{path}: there already")
        return 0
    words, counts, lengths = sample_statistics(args.sample)
    if args.size < len(lengths):
        parser.error(f"--size must be at least the sample's {len(lengths):,} passages, got "
                     f"{args.size:,}")
    generated = args.size - len(lengths)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    rng = np.random.default_rng(args.seed)
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=1) as out:
        with gzip.open(args.sample, "rt", encoding="utf-8") as sample:
            out.writelines(sample)  # the sample's articles as they are
        with tqdm(total=generated, desc="Generating", unit=" passages") as bar:
            for lines in generated_rows(generated, len(lengths), words, counts, lengths, rng):
                out.writelines(lines)
                bar.update(len(lines))
    os.replace(tmp, path)
    write_json_atomic(str(manifest), {"settings": settings, "sample_passages": len(lengths), "generated": generated,
                                      "sample_words": len(words), "bytes": path.stat().st_size})
    print(f"{path}: {len(lengths):,} sample passages and {generated:,} generated ({path.stat().st_size / 2**20:,.0f} "
          f"MiB)")
    return 0


def corpus_path(out_dir: Path, num_passages: int) -> Path:
    """Where the corpus of ``num_passages`` passages is written."""
    return out_dir / f"wikipedia-synthetic-{num_passages}.jsonl.gz"


if __name__ == "__main__":
    sys.exit(main())
