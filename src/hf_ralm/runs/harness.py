"""One run harness for every long run (datatrove's executor shape): [`RunOptions`][hf_ralm.RunOptions], how a run is
kept and shared (its output folder, chunk size, overwrite, repair, shards, batch size, progress), and
[`ChunkRun`][hf_ralm.ChunkRun], the driver that owns this worker's chunks of the run, its
[`RecordStore`][hf_ralm.RecordStore] (opened, resumed, overwritten, repaired), skipping what is saved, the barrier of a
sharded run and the final file, written once, by the right worker. The steps stay plain: a function that computes the
records of positions ``[start, stop)``.

Every run cuts its positions (windows, questions, passages) into a fixed grid of ``chunk_size``: worker ``I`` of
``N`` computes the chunks ``I, I + N, ...`` (``Shard``), each minus what the store holds
already (a run resumed with another chunk size saved parts of it: ``uncovered``), so a
chunk never depends on what was resumed, and an interrupted run goes on where it stopped with the same figures.

Examples:
    >>> import tempfile
    >>> from hf_ralm.runs.store import RecordStore
    >>> options = RunOptions(output_dir=tempfile.mkdtemp(), chunk_size=2, show_progress=False)
    >>> run = ChunkRun(options)
    >>> store = run.open(RecordStore, options.output_dir, {"task": "squares"})
    >>> run.run(5, lambda start, stop: [{"n": n * n} for n in range(start, stop)], desc="Squaring", unit="n")
    >>> [row["n"] for row in run.rows()], run.complete(5), run.computed
    ([0, 1, 4, 9, 16], True, [(0, 2), (2, 4), (4, 5)])
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..errors import SettingError, setting
from .output_folder import check_output_folder
from .store import RecordStore
from ..utils.checks import check_count
from ..utils.progress import tqdm
from .shards import Shard, distributed_barrier, is_writer, uncovered

Store = TypeVar("Store", bound=RecordStore)
Step = Callable[[int, int], Sequence[Any]]
"""A run's step: the records of positions ``[start, stop)``, in order."""


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a long run is kept and shared, the same for every run (``eval-lm``, ``retrieve``, ``rerank-data``,
    ``eval-qa``, ``--compare``, the dense index's encoding).

    Args:
        output_dir: where the run keeps its records and results (``None``: in memory, nothing resumed).
        chunk_size: positions per chunk, what an interrupted run loses at most (``None``: the run's own default).
        overwrite: delete the folder's records (and final files) first; refused while a worker computes there.
        repair: move damaged chunks aside and compute them again, instead of refusing them (and the chunks of an
            older version, without checksum and settings digest).
        accept_unverified: use the chunks of an older version as they are (after their other checks) instead of
            refusing them; ``eval.json`` records how many (``accepted_unverified_chunks``).
        num_shards: how many workers share the run (``None``: from torchrun, accelerate or a Slurm array, else 1).
        shard_id: which of them this process is (0 to ``num_shards - 1``).
        batch_size: inputs per forward pass, or ``"auto"`` ([`BatchSize`][hf_ralm.BatchSize]).
        show_progress: show progress bars.
        report_extra: what else the caller records in the run's report (``eval.json``), e.g. its arguments.

    Examples:
        >>> RunOptions(output_dir="runs/bm25", num_shards=4, shard_id=1).shard.description
        '1 of 4 (arguments)'
        >>> options, rest = RunOptions.split({"chunk_size": 64, "max_eval_tokens": 512})
        >>> options.chunk_size, rest
        (64, {'max_eval_tokens': 512})
    """

    output_dir: str | os.PathLike | None = None
    chunk_size: int | None = None
    overwrite: bool = False
    repair: bool = False
    accept_unverified: bool = False
    num_shards: int | None = None
    shard_id: int | None = None
    batch_size: int | str = DEFAULT_BATCH_SIZE
    show_progress: bool = True
    report_extra: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.chunk_size is not None:
            check_count("chunk_size", self.chunk_size)

    @property
    def shard(self) -> Shard:
        """This worker's part of the run: of ``num_shards``/``shard_id`` when given, else of the environment
        (torchrun, accelerate or a Slurm array)."""
        return Shard.resolve(self.num_shards, self.shard_id)

    @classmethod
    def split(cls, kwargs: Mapping[str, Any]) -> tuple[RunOptions, dict[str, Any]]:
        """The run options among keyword arguments, and the other arguments: what the flat keyword form
        (``model.evaluate_perplexity(text, output_dir=..., chunk_size=...)``) passes.

        Args:
            kwargs: keyword arguments; a ``run`` among them is a [`RunOptions`][hf_ralm.RunOptions] the others
                update.

        Returns:
            The run options, and the arguments that are none of their fields.
        """
        names = {field.name for field in dataclasses.fields(cls)}
        given = {key: value for key, value in kwargs.items() if key in names}
        rest = {key: value for key, value in kwargs.items() if key not in names and key != "run"}
        return dataclasses.replace(kwargs.get("run") or cls(), **given), rest

    def check_output_dir(self, own: Sequence[str], what: str) -> None:
        """Refuse, before any work, an ``output_dir`` that holds anything but the run's own files.

        Args:
            own: glob patterns of the run's files (``hf_ralm.runs.output_folder.check_output_folder``).
            what: the run, as messages name it.

        Raises:
            OutputFolderError: ``output_dir`` holds other files (the message names one).
        """
        if self.output_dir is not None:
            check_output_folder(self.output_dir, own, what)


class ChunkRun:
    """This worker's part of a chunked run: the chunks it computes, its record store (or, without
    ``options.output_dir``, the records in memory), the progress bar, the barrier and the final file.

    Every run cuts its positions (windows, questions, passages) into a fixed grid of ``chunk_size``: worker ``I`` of
    ``N`` computes the chunks ``I, I + N, ...``, each minus what the store holds already, so a chunk never depends on
    what was resumed, and an interrupted run goes on where it stopped with the same figures.

    Args:
        options: how the run is kept and shared.
        chunk_size: positions per chunk (by default ``options.chunk_size``).
        what: the run, as messages name it.
        shard: this worker's part (by default ``options.shard``).

    Attributes:
        store: the record store, once opened ([`open`][hf_ralm.ChunkRun.open]; ``None``: the records are kept in
            memory).
        num_resumed: the records the store held when it was opened.
        computed: the ``[start, stop)`` of the records this process computed, in order.

    Raises:
        SettingError: several workers share a run without an output folder (the store they share).

    Examples:
        ```python
        run = ChunkRun(RunOptions(output_dir="out", chunk_size=256), what="run")
        run.open(WindowRecordWriter, "out/windows", settings, windows=plan.windows)
        run.run(len(plan.windows), lambda start, stop: score(plan.windows[start:stop]), desc="Evaluating", unit="win")
        run.gather()                               # the other workers' chunks
        if run.complete(len(plan.windows)):
            run.finish(lambda: write_json_atomic("out/eval.json", figures))   # once, by the writer
        ```
    """

    def __init__(self, options: RunOptions, *, chunk_size: int | None = None, what: str = "run",
                 shard: Shard | None = None) -> None:
        self.options = options
        self.chunk_size = options.chunk_size if chunk_size is None else chunk_size
        check_count("chunk_size", self.chunk_size)
        self.shard = options.shard if shard is None else shard
        if self.shard.count > 1 and options.output_dir is None:
            raise SettingError(f"{self.shard.count} workers ({self.shard.launcher}) share a {what} through its "
                               f"{setting('output_dir')}: give one.")
        self.store: RecordStore | None = None
        self.num_resumed = 0
        self.computed: list[tuple[int, int]] = []
        """The ``[start, stop)`` of the records this process computed, in order."""
        self.bar: tqdm | None = None
        self._held: dict[tuple[int, int], list[Any]] = {}  # the records, without a store

    # the store ---------------------------------------------------------------------------------------------------

    def open(self, store_type: type[Store], folder: str | os.PathLike, settings: Mapping[str, Any], *,
             reproduce: Mapping[str, Any] | None = None, overwrite: bool | None = None,
             final: Sequence[str | os.PathLike] = (), **store_options: Any) -> Store:
        """Open (resume) the run's record store.

        With ``overwrite``, the writing worker deletes the records and the ``final`` files first, and every worker
        waits for it (under torch.distributed) before it opens the folder.

        Args:
            store_type: the store's class ([`RecordStore`][hf_ralm.RecordStore] or a subclass).
            folder: where the store keeps its chunks.
            settings: what the records depend on; a store whose saved settings differ is refused.
            reproduce: what the records are checked against as well (passed to the store).
            overwrite: delete the records first (by default the options').
            final: the run's final files, deleted with the records.
            **store_options: what else the store takes.

        Returns:
            The store, with what it holds resumed.
        """
        if (self.options.overwrite if overwrite is None else overwrite) and is_writer():
            store_type.remove(folder)  # the records first: refused while a worker computes them
            for path in final:
                Path(path).unlink(missing_ok=True)
        distributed_barrier()
        self.store = store_type(folder, settings, chunk_size=self.chunk_size, repair=self.options.repair,
                                accept_unverified=self.options.accept_unverified, reproduce=reproduce,
                                **store_options)
        self.num_resumed = self.store.num_done
        return self.store

    # the loop ----------------------------------------------------------------------------------------------------

    @contextmanager
    def progress(self, total: int | None, *, desc: str, unit: str, initial: int | None = None) -> Iterator[tqdm]:
        """The run's progress bar while chunks are computed in it; the store is closed (its lock let go) at the end,
        its buffered records saved.

        Args:
            total: the run's positions.
            desc: the bar's label.
            unit: what a position is, as the bar names it.
            initial: where the bar starts (by default at the records held).

        Yields:
            The bar.
        """
        with self.store or nullcontext(), tqdm(total=total, initial=self.num_done if initial is None else initial,
                                               desc=desc, unit=unit, disable=not self.options.show_progress) as bar:
            self.bar = bar
            try:
                yield bar
            finally:
                self.bar = None

    def compute(self, start: int, stop: int, step: Step, *, info: Callable[[], Mapping[str, Any]] | None = None,
                after: Callable[[int, Sequence[Any]], None] | None = None,
                status: Callable[[], str] | None = None) -> None:
        """Compute chunk ``[start, stop)`` of the grid, when it is this worker's: the positions the store lacks.

        Args:
            start: the chunk's first position.
            stop: one past its last.
            step: the records of positions ``[begin, end)``, for each run of positions the store does not hold.
            info: what else each chunk file records (called once per saved part).
            after: called with each part's first position and records once they are saved or kept.
            status: what the bar's line shows at its end once a part is done (e.g. where the time went).
        """
        if not self.shard.takes(start // self.chunk_size):
            return
        for begin, end in uncovered(start, stop, self.ranges()):
            # the step's own bars (a chunk's reranking, scoring) advance the run's, which stands still otherwise
            with self.bar.share(end - begin) if self.bar is not None else nullcontext():
                records = step(begin, end)
            if self.store is None:
                self._held[begin, end] = list(records)
            else:
                self.store.save(begin, records, **(info() if info else {}))
            self.computed.append((begin, end))
            if after is not None:
                after(begin, records)
            if status is not None and self.bar is not None:
                self.bar.set_postfix_str(status())

    def run(self, total: int, step: Step, *, desc: str, unit: str, initial: int | None = None, **hooks: Any) -> None:
        """Compute every chunk of the run that is this worker's, under the run's progress bar.

        Args:
            total: the run's positions.
            step: the records of positions ``[start, stop)``.
            desc: the bar's label.
            unit: what a position is, as the bar names it.
            initial: where the bar starts (by default at the records held).
            **hooks: ``info``, ``after`` and ``status``, as [`compute`][hf_ralm.ChunkRun.compute] takes them.
        """
        with self.progress(total, desc=desc, unit=unit, initial=initial):
            for start in range(0, total, self.chunk_size):
                self.compute(start, min(start + self.chunk_size, total), step, **hooks)

    def gather(self) -> None:
        """With many workers: wait for the others (under torch.distributed) and read the chunks they saved."""
        if self.shard.count > 1:
            distributed_barrier()
            self.store.refresh()

    # what is done ------------------------------------------------------------------------------------------------

    def ranges(self) -> list[tuple[int, int]]:
        """The ``[start, stop)`` of every chunk held (saved, or computed in memory), in order."""
        return self.store.ranges() if self.store is not None else sorted(self._held)

    def items(self) -> list[tuple[tuple[int, int], list[Any]]]:
        """Every chunk held: its ``[start, stop)`` and records, in order."""
        return self.store.items() if self.store is not None else [(span, self._held[span]) for span in self.ranges()]

    def rows(self) -> list[Any]:
        """Every record held, in order of position."""
        return [row for _, rows in self.items() for row in rows]

    @property
    def num_done(self) -> int:
        """The records held (saved, or computed in memory)."""
        return sum(stop - start for start, stop in self.ranges())

    @property
    def num_computed(self) -> int:
        """The records this process computed."""
        return sum(stop - start for start, stop in self.computed)

    def complete(self, total: int) -> bool:
        """Whether the records of every position ``[0, total)`` are held.

        Args:
            total: the run's positions.

        Returns:
            True when no position is missing.
        """
        return not uncovered(0, total, self.ranges())

    # the final files ---------------------------------------------------------------------------------------------

    def write(self, write: Callable[[], None], *, check: bool = True) -> None:
        """Write what the run derives from its records (a report), by the writing worker alone; nothing without a
        store.

        Args:
            write: writes the files.
            check: first check the store is unchanged, so nothing is written from records another run replaced
                meanwhile (``False``: ``write`` checks itself, e.g. under a lock of its own).

        Raises:
            OutputFolderError: the folder's settings are no longer the store's (another run replaced the folder, or
                it was deleted, meanwhile).
        """
        if self.store is not None and is_writer():
            if check:
                self.store.check_unchanged()
            write()

    def finish(self, write: Callable[[], None], *, check: bool = True) -> None:
        """[`write`][hf_ralm.ChunkRun.write] the final files, then wait (under torch.distributed) until every worker
        may read them.

        Args:
            write: writes the files.
            check: as [`write`][hf_ralm.ChunkRun.write] takes it.
        """
        self.write(write, check=check)
        distributed_barrier()
