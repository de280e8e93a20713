"""The figure suite's sweep: points measured one at a time into the figure's CSV, resumably, and the figure drawn
from that CSV.

A point is one measurement, named by the values of ALL its settings: the model, the data, what the figure varies
and what it keeps fixed (dtype, max_eval_tokens, the index on disk ...). Its CSV row holds those settings and what
was measured. The CSV is written again after every point (a temporary file, fsync, rename), so an interrupted run
keeps every finished point, and a rerun skips the points whose settings are already in a row. A rerun with another
fixed setting (say --max-eval-tokens 1024) finds no such row, so it measures new rows beside the old ones instead of
mixing them; the plots then label every setting that differs between the rows of a line (:mod:`plotting`).

    >>> table = Table("/tmp/example.csv", settings=("model", "stride"), measures=("token_ppl",))
    >>> table.key({"model": "SmolLM2-135M", "stride": 4, "token_ppl": 15.1})
    ('SmolLM2-135M', '4')
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

BENCHMARKS = Path(__file__).resolve().parents[1]
if str(BENCHMARKS) not in sys.path:  # bench_setup and bench_common, when a figure script is run as a file
    sys.path.insert(0, str(BENCHMARKS))

from bench_setup import CACHE, HELDOUT_DIR, MODELS_DIR, READERS, REPO, eval_sets  # noqa: E402

FIGURES_DIR = REPO / "docs" / "figures"


def cell(value) -> str:
    """How a setting is written in the CSV and compared with a row's: ``""`` for ``None`` (not applicable)."""
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Table:
    """A figure's CSV: the ``settings`` columns name a point, the ``measures`` columns hold what was measured."""

    path: str | os.PathLike
    settings: tuple[str, ...]
    measures: tuple[str, ...]

    @property
    def columns(self) -> list[str]:
        return [*self.settings, *self.measures]

    def key(self, point: Mapping) -> tuple[str, ...]:
        """The point's settings, as written in the CSV."""
        return tuple(cell(point.get(name)) for name in self.settings)

    def read(self) -> list[dict[str, str]]:
        """The rows so far (none when the file does not exist).

        Raises:
            ValueError: the file has other columns (written by another version of the script).
        """
        if not os.path.isfile(self.path):
            return []
        with open(self.path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
        if reader.fieldnames != self.columns:
            raise ValueError(f"{self.path} has the columns {reader.fieldnames}, not the {self.columns} this script "
                             "writes (another version of the script wrote it): move it away and rerun.")
        return rows

    def append(self, row: Mapping) -> None:
        """Add a row and write the whole CSV again, atomically."""
        from hf_ralm.retrieval.jsonfile import write_text_atomic

        missing = [name for name in self.columns if name not in row]
        if missing:
            raise ValueError(f"A row of {self.path} lacks the columns {missing}.")
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows([*self.read(), {name: cell(row[name]) for name in self.columns}])
        write_text_atomic(str(self.path), out.getvalue(), suffix=".csv")


def run_points(table: Table, points: Sequence[dict], measure: Callable[[dict], dict], desc: str) -> int:
    """Measure every point not in ``table`` yet, in order, writing its row (the point's settings updated by what
    ``measure`` returns) as soon as it is measured. Returns how many points were measured."""
    from tqdm.auto import tqdm

    done = {table.key(row) for row in table.read()}
    todo = [point for point in points if table.key(point) not in done]
    varied = [name for name in table.settings if len({cell(point.get(name)) for point in points}) > 1]
    print(f"[{desc}] {len(points) - len(todo)} of {len(points)} points already in {table.path}; "
          f"{len(todo)} to measure", file=sys.stderr, flush=True)
    for point in tqdm(todo, desc=desc, unit="point"):
        row = {**point, **measure(point)}
        table.append(row)
        first = table.measures[0]
        tqdm.write(f"[{desc}] " + ", ".join(f"{name}={cell(row[name])}" for name in varied)
                   + f": {first}={row[first]:.5g}", file=sys.stderr)
    return len(todo)


def provenance(model) -> dict:
    """The measure columns every figure ends with: where and when a point was measured (``device``, torch
    ``threads``, ``measured_at`` in UTC)."""
    from datetime import datetime, timezone

    import torch

    from bench_common import device_name
    from hf_ralm.modeling_utils import model_device

    return {"device": device_name(model_device(model)), "threads": torch.get_num_threads(),
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


# ------------------------------------------------------------------------------------------------------------------
# The command line every figure script shares
# ------------------------------------------------------------------------------------------------------------------


def parser(doc: str, texts: bool = True) -> argparse.ArgumentParser:
    """The figure scripts' common flags: where the CSV and PNG go, --plot-only, which models, dtype, device, batch
    size, where the models and the Wikipedia sample are; with ``texts``, which evaluation texts, where the held-out
    one is, and the token budget."""
    from bench_setup import WIKIPEDIA

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default=str(FIGURES_DIR), help="where the CSV and the PNG go (default docs/figures)")
    p.add_argument("--plot-only", action="store_true", help="draw the PNG from the CSV, measure nothing")
    p.add_argument("--models", nargs="+", choices=list(READERS), default=list(READERS))
    p.add_argument("--dtype", choices=["float32", "bfloat16"],
                   help="one dtype for every model (default: SmolLM2 float32, Gemma bfloat16, as the tables)")
    p.add_argument("--device", help="default: cuda when there is one, else cpu")
    p.add_argument("--batch-size", type=int, default=8, help="windows (or questions) per forward")
    p.add_argument("--models-dir", default=str(MODELS_DIR))
    p.add_argument("--corpus", default=str(WIKIPEDIA), help="the Wikipedia sample the indexes are built from")
    if texts:
        p.add_argument("--datasets", nargs="+", choices=list(eval_sets(HELDOUT_DIR)),
                       default=list(eval_sets(HELDOUT_DIR)))
        p.add_argument("--heldout-dir", default=str(HELDOUT_DIR), help="benchmarks/make_heldout.py's output")
        p.add_argument("--max-eval-tokens", type=int, default=2048,
                       help="tokens evaluated per text (default 2048; 1024 where a CPU run cannot fit: the CSV "
                            "records which)")
    return p


def add_index_flags(p: argparse.ArgumentParser, kinds: Iterable[str]) -> None:
    """The index folder flags of the retriever ``kinds`` a script uses (each built there from --corpus if missing)."""
    from bench_setup import BM25_INDEX

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
         plot: Callable[[list[dict], str], None], name: str) -> list[dict]:
    """A figure script's run: measure the points not in ``table`` yet (unless ``--plot-only``), then draw every row
    of the CSV into ``<out-dir>/<name>.png``. Returns the rows drawn."""
    if not args.plot_only:
        run_points(table, points(), measure, name)
    rows = table.read()
    if not rows:
        raise SystemExit(f"{table.path} has no rows to draw: run without --plot-only first.")
    png = os.path.join(args.out_dir, f"{name}.png")
    plot(rows, png)
    print(f"[{name}] {len(rows)} rows of {table.path} drawn into {png}", file=sys.stderr)
    return rows
