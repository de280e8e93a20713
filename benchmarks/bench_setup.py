"""What the table and figure scripts run on: the two readers, the two evaluation texts, the Wikipedia sample and its
BM25 index, with their default locations on this project's machines, and loading a reader.

    >>> READERS["Gemma-3-270M"].bos_every_window
    True
    >>> sorted(eval_sets(HELDOUT_DIR))
    ['WikiText-103 test', 'held-out Wikipedia']
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
RESULTS = REPO / "results"  # the committed run records (results/README.md)
CACHE = Path.home() / ".cache" / "hf-ralm"
MODELS_DIR = Path(os.environ.get("HF_RALM_MODELS", CACHE / "models"))
WIKIPEDIA = SHARED / "wikipedia-2015-sample" / "articles.jsonl.gz"
BM25_INDEX = CACHE / "index" / "wikipedia-2015-sample-bm25"
HELDOUT_DIR = CACHE / "heldout"  # benchmarks/data/make_heldout.py writes it
HELDOUT_COMMAND = (f"python benchmarks/data/make_heldout.py --corpus {WIKIPEDIA} --out-dir {HELDOUT_DIR}")
DEFAULT_SETTINGS = {"retrieval_stride": 4, "query_length": 32, "max_length": 512, "max_doc_tokens": 256,
                    "rerank_candidates": 16, "rerank_tokens": 16}
"""The defaults of the benchmarks' RALM settings flags (``add_ralm_arguments(parser, settings=...,
defaults=DEFAULT_SETTINGS)``): s=4, ℓ=32, L=512, passages cut to 256 tokens, k=16 candidates ranked on s'=16 tokens.
Written here rather than read from RalmConfig so that a benchmark's figures do not move with the library's defaults."""


@dataclass(frozen=True)
class Reader:
    """A reader model: its folder under the models folder, whether it gets a BOS in every window (Gemma: the fair
    baseline, docs/conventions.md) and the dtype the perplexity tables run it in (fp32 Gemma is ~9x slower here)."""

    folder: str
    bos_every_window: bool
    dtype: str


READERS = {
    "SmolLM2-135M": Reader("smollm2-135m-instruct", bos_every_window=False, dtype="float32"),
    "Gemma-3-270M": Reader("gemma-3-270m", bos_every_window=True, dtype="bfloat16"),
}


def eval_sets(heldout_dir: str | os.PathLike) -> dict[str, tuple[str, str]]:
    """``{name: (rows file, forbidden titles file)}`` of the two evaluation texts: held-out Wikipedia articles
    (benchmarks/data/make_heldout.py; their own titles are forbidden) and WikiText-103 test (the paper's forbidden
    titles)."""
    return {
        "held-out Wikipedia": (os.path.join(heldout_dir, "rows.jsonl"), os.path.join(heldout_dir, "titles.txt")),
        "WikiText-103 test": (str(SHARED / "wikitext-103" / "test.jsonl"),
                              str(SHARED / "wikitext-103" / "forbidden_titles.txt")),
    }


def load_reader(models_dir: str | os.PathLike, name: str, dtype: str, device: str | None = None):
    """``(model, tokenizer)`` of the reader ``name`` (a :data:`READERS` key) in ``dtype``, in eval mode on
    ``device`` (default: CUDA when there is one)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = os.path.join(models_dir, READERS[name].folder)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"No model folder at {path}: fetch the models with ../shared/tools/get-models, or "
                                "pass --models-dir.")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()
    return model, AutoTokenizer.from_pretrained(path)
