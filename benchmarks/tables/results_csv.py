"""Resumable result CSVs: points measured one at a time, each written as a row as soon as it is measured, so that an
interrupted run keeps every finished point and a rerun skips the points already there. The figure scripts
(figures/sweep.py) and gate_tables.py measure into them.

A point is named by the values of ALL its settings (the ``settings`` columns): a rerun with another value of any of
them finds no such row and measures a new one beside the old. The whole CSV is written again after every point (a
temporary file, fsync, rename), and a CSV with other columns (another version of the script) is refused, but for
the ``optional`` measures a table added later: an older CSV without them is read with those cells empty, and a rerun
can fill them (:func:`run_points`'s ``redo``).

    >>> table = Table("/tmp/example.csv", settings=("model", "stride"), measures=("token_ppl",))
    >>> table.key({"model": "SmolLM2-135M", "stride": 4, "token_ppl": 15.1})
    ('SmolLM2-135M', '4')
"""

from __future__ import annotations

import csv
import io
import os
import sys
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence


def cell(value) -> str:
    """How a setting is written in the CSV and compared with a row's: ``""`` for ``None`` (not applicable)."""
    return "" if value is None else str(value)


def point_key(settings: Sequence[str], point: Mapping) -> tuple[str, ...]:
    """A point's name: the values of its ``settings``, as written in a CSV."""
    return tuple(cell(point.get(name)) for name in settings)


@dataclass(frozen=True)
class Table:
    """A results CSV: the ``settings`` columns name a point, the ``measures`` columns hold what was measured (the
    ``optional`` ones among them may be missing from an older CSV)."""

    path: str | os.PathLike
    settings: tuple[str, ...]
    measures: tuple[str, ...]
    optional: tuple[str, ...] = ()

    @property
    def columns(self) -> list[str]:
        return [*self.settings, *self.measures]

    def key(self, point: Mapping) -> tuple[str, ...]:
        """The point's settings, as written in the CSV."""
        return point_key(self.settings, point)

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
        older = [name for name in self.columns if name not in self.optional]
        if reader.fieldnames not in (self.columns, older):
            raise ValueError(f"{self.path} has the columns {reader.fieldnames}, not the {self.columns} this script "
                             "writes (another version of the script wrote it): move it away and rerun.")
        return [{name: row.get(name, "") for name in self.columns} for row in rows]

    def put(self, row: Mapping, replacing: Mapping | None = None) -> None:
        """Add a row, or replace the row of the same point (or of the point ``replacing`` names), and write the whole
        CSV again, atomically."""
        from hf_ralm.utils import write_text_atomic

        missing = [name for name in self.columns if name not in row]
        if missing:
            raise ValueError(f"A row of {self.path} lacks the columns {missing}.")
        new = {name: cell(row[name]) for name in self.columns}
        rows = self.read()
        same = [i for i, old in enumerate(rows) if self.key(old) == self.key(replacing or new)]
        if same:
            rows[same[0]] = new
        else:
            rows.append(new)
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        write_text_atomic(str(self.path), out.getvalue(), suffix=".csv")

    def row(self, point: Mapping) -> dict[str, str] | None:
        """The point's row, or None when it has not been measured."""
        return next((row for row in self.read() if self.key(row) == self.key(point)), None)


# A point measured again to fill in its interval (--fill-intervals) must reproduce its row's figure this closely for
# the row to keep what it measured ...
REFILL_RTOL = 1e-3
# ... or, in bfloat16, it is measured anew up to this far: two exact paths that differ in arithmetic order alone
# (batch composition, a cached passage against a full forward) differ by about 0.1 nats a window (sd over 4 tokens),
# which moved 1,024-token perplexities by up to 0.54% and NLL sums by up to 0.11% when the figures were measured
# again (docs/results.md, "Retrieval gates"); an lm gate's choices at a threshold flip with it. Further apart, the
# row was measured with other data and is refused.
REMEASURE_RTOL = 1e-2


def fill_in(old: Mapping[str, str], new: Mapping, columns: Sequence[str], check: str, rtol: float,
            anew_within: float | None = None) -> dict:
    """``old`` (a row measured before ``columns`` existed) with ``columns`` taken from ``new`` (the same point measured
    again): the old row keeps what it measured (its times above all, which a rerun in the background would not
    reproduce), once ``new`` reproduces its ``check`` column to ``rtol`` (relative). With ``anew_within``, a ``new``
    further than ``rtol`` but at most that far from ``old`` replaces it whole (the point measured anew, said on
    stderr): a figure whose rounding another version of the code changes.

    Example:
        >>> fill_in({"ppl": "12.0", "s": "9.5", "low": ""}, {"ppl": 12.0001, "s": 30.1, "low": 11.0}, ["low"], "ppl",
        ...         1e-3)
        {'ppl': '12.0', 's': '9.5', 'low': 11.0}

    Raises:
        ValueError: ``new`` does not reproduce ``old``'s ``check`` (to ``anew_within``, where given).
    """
    was, now = float(old[check]), float(new[check])
    rel = abs(now - was) / abs(was)
    if anew_within is not None and rtol < rel <= anew_within:
        print(f"Measured again, {check} is {now:.6g} against the row's {was:.6g} ({rel:.2%}, within "
              f"{anew_within:.0%}): the row is measured anew", file=sys.stderr)
        return dict(new)
    if rel > rtol:
        raise ValueError(f"Measured again, {check} is {now:.6g} against the row's {was:.6g} ({rel:.2g} relative, more "
                         f"than {anew_within or rtol:g}): the row was measured with something else (data, index, "
                         "code). Move the row away to measure it anew.")
    return {**old, **{column: new[column] for column in columns}}


def run_points(table: Table, points: Sequence[dict], measure: Callable[[dict], dict], desc: str,
               redo: Callable[[dict], bool] | None = None) -> int:
    """Measure every point not in ``table`` yet, in order, writing its row (the point's settings updated by what
    ``measure`` returns) as soon as it is measured; with ``redo``, also the points whose row ``redo(row)`` is true
    for, each row replaced by the new one. Returns how many points were measured."""
    from tqdm.auto import tqdm

    done = {table.key(row) for row in table.read() if redo is None or not redo(row)}
    todo = [point for point in points if table.key(point) not in done]
    varied = [name for name in table.settings if len({cell(point.get(name)) for point in points}) > 1]
    print(f"[{desc}] {len(points) - len(todo)} of {len(points)} points already in {table.path}; "
          f"{len(todo)} to measure", file=sys.stderr, flush=True)
    for point in tqdm(todo, desc=desc, unit="point"):
        row = {**point, **measure(point)}
        table.put(row)
        first = table.measures[0]
        tqdm.write(f"[{desc}] " + ", ".join(f"{name}={cell(row[name])}" for name in varied)
                   + f": {first}={float(row[first]):.5g}", file=sys.stderr)
    return len(todo)
