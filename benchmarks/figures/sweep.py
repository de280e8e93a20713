"""The figure suite's sweep: points measured one at a time into the figure's CSV, resumably (:mod:`results_csv`'s
:class:`Table` and :func:`run_points`, shared with gate_tables.py), and the figure drawn from that CSV.

A point is one measurement, named by the values of ALL its settings: the model, the data, what the figure varies
and what it keeps fixed (dtype, max_eval_tokens, the index on disk ...). A rerun with another fixed setting (say
--max-eval-tokens 1024) finds no such row, so it measures new rows beside the old ones instead of mixing them; the
plots then label every setting that differs between the rows of a line (:mod:`plotting`).

    >>> table = Table("/tmp/example.csv", settings=("model", "stride"), measures=("token_ppl",))
    >>> table.columns
    ['model', 'stride', 'token_ppl']
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Iterable, Optional

from benchmarks.bench_setup import CACHE, HELDOUT_DIR, MODELS_DIR, READERS, REPO, eval_sets
from benchmarks.tables.results_csv import Table, run_points  # noqa: F401  (the figure scripts: sweep.Table, ...)

FIGURES_DIR = REPO / "docs" / "figures"


def provenance(model) -> dict:
    """The measure columns every figure ends with: where and when a point was measured (``device``, torch
    ``threads``, ``measured_at`` in UTC)."""
    from datetime import datetime, timezone

    import torch

    from benchmarks.bench_common import device_name
    from hf_ralm import model_device

    return {"device": device_name(model_device(model)), "threads": torch.get_num_threads(),
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


# ------------------------------------------------------------------------------------------------------------------
# The command line every figure script shares
# ------------------------------------------------------------------------------------------------------------------


def parser(doc: str, texts: bool = True, dtype: Optional[str] = None) -> argparse.ArgumentParser:
    """The figure scripts' common flags: where the CSV and PNG go, --plot-only, which models, dtype (``dtype`` is the
    default; None runs each model in the tables' dtype), device, batch size, where the models and the Wikipedia sample
    are; with ``texts``, which evaluation texts, where the held-out one is, and the token budget."""
    from benchmarks.bench_setup import WIKIPEDIA

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default=str(FIGURES_DIR), help="where the CSV and the PNG go (default docs/figures)")
    p.add_argument("--plot-only", action="store_true", help="draw the PNG from the CSV, measure nothing")
    p.add_argument("--models", nargs="+", choices=list(READERS), default=list(READERS))
    dtype_default = dtype or "SmolLM2 in float32 and Gemma in bfloat16, as the tables"
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default=dtype,
                   help=f"one dtype for every model (default: {dtype_default})")
    p.add_argument("--device", help="default: cuda when there is one, else cpu")
    p.add_argument("--batch-size", type=int, default=8, help="windows (or questions) per forward")
    p.add_argument("--models-dir", default=str(MODELS_DIR))
    p.add_argument("--corpus", default=str(WIKIPEDIA), help="the Wikipedia sample the indexes are built from")
    if texts:
        p.add_argument("--datasets", nargs="+", choices=list(eval_sets(HELDOUT_DIR)),
                       default=list(eval_sets(HELDOUT_DIR)))
        p.add_argument("--heldout-dir", default=str(HELDOUT_DIR), help="benchmarks/data/make_heldout.py's output")
        p.add_argument("--max-eval-tokens", type=int, default=2048,
                       help="tokens evaluated per text (default 2048; 1024 where a CPU run cannot fit: the CSV "
                            "records which)")
    return p


def add_index_flags(p: argparse.ArgumentParser, kinds: Iterable[str]) -> None:
    """The index folder flags of the retriever ``kinds`` a script uses (each built there from --corpus if missing)."""
    from benchmarks.bench_setup import BM25_INDEX

    index = CACHE / "index"
    defaults = {"bm25": ("--index-dir", BM25_INDEX, "BM25 (bm25s) index of the whole sample"),
                "lucene": ("--lucene-index-dir", index / "wikipedia-2015-sample-lucene",
                           "Lucene index of the whole sample (built in ~1.5 min if missing)"),
                "dense": ("--dense-index-dir", index / "wikipedia-2015-sample-dense",
                          "MiniLM (mean pooling) FAISS index of the whole sample: built if missing, which takes ~2 h "
                          "on a 2-core CPU and resumes after an interruption")}
    for kind in kinds:
        flag, default, what = defaults[kind]
        p.add_argument(flag, default=str(default), help=f"{what} (default {default})")


def main(args: argparse.Namespace, table: Table, points: Callable[[], list[dict]], measure: Callable[[dict], dict],
         plot: Callable[[list[dict], str], None], name: str,
         redo: Optional[Callable[[dict], bool]] = None) -> list[dict]:
    """A figure script's run: measure the points not in ``table`` yet (and those whose row ``redo`` asks for again,
    :func:`run_points`) unless ``--plot-only``, then draw every row of the CSV into ``<out-dir>/<name>.png``. Returns
    the rows drawn."""
    if not args.plot_only:
        run_points(table, points(), measure, name, redo=redo)
    rows = table.read()
    if not rows:
        raise SystemExit(f"{table.path} has no rows to draw: run without --plot-only first.")
    png = os.path.join(args.out_dir, f"{name}.png")
    plot(rows, png)
    print(f"[{name}] {len(rows)} rows of {table.path} drawn into {png}", file=sys.stderr)
    return rows
