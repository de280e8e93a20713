"""Which part of a run this process does when many workers share it: worker ``index`` of ``count`` takes the chunks
``index, index + count, ...`` of the run's one plan (``Shard.takes``). The shard comes
from the arguments (``--num-shards N --shard-id I``), else from what launched the process: ``torchrun`` and ``accelerate
launch`` set ``RANK`` and ``WORLD_SIZE`` (and ``LOCAL_RANK``, the GPU of the process on its machine), a Slurm job array
sets ``SLURM_ARRAY_TASK_ID`` and ``SLURM_ARRAY_TASK_COUNT`` (counted from ``SLURM_ARRAY_TASK_MIN``; ignored with
``HF_RALM_IGNORE_SLURM=1``, for an array that runs a sweep of separate runs); else one worker does it all.
``Shard.announcement`` says which part a worker takes when the environment, not
the arguments, decided it.

Examples:
    >>> Shard.resolve(num_shards=4, shard_id=1).takes(5), Shard.resolve(environ={}).count
    (True, 1)
    >>> Shard.resolve(environ={"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    Shard(index=1, count=2, launcher='torchrun', local_rank=1)
    >>> Shard.resolve(environ={"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_COUNT": "4"})
    Shard(index=2, count=4, launcher='slurm array', local_rank=None)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from ..errors import SettingError, setting
from ..utils.checks import check_count


@dataclass(frozen=True)
class Shard:
    """Worker ``index`` of ``count`` (``launcher``: what says so; ``local_rank``: the process's GPU on its machine,
    under torchrun or accelerate)."""

    index: int = 0
    count: int = 1
    launcher: str = "one process"
    local_rank: int | None = None

    def takes(self, chunk: int) -> bool:
        """Whether this worker computes a chunk of the run's grid.

        Args:
            chunk: the chunk's number.

        Returns:
            True when ``chunk % count == index``.
        """
        return chunk % self.count == self.index

    @property
    def description(self) -> str:
        """This worker as a run's figures name it.

        Examples:
            >>> Shard(1, 4, "arguments").description
            '1 of 4 (arguments)'
        """
        return f"{self.index} of {self.count} ({self.launcher})"

    def announcement(self) -> str | None:
        """One line saying which part of the run this worker does, when the environment set it (a torchrun or a
        Slurm array with more than one worker), and how to run alone; ``None`` otherwise.

        Examples:
            >>> Shard(2, 4, "slurm array").announcement()[:58]
            'hf-ralm: worker 2 of 4 (0 to 3), from the Slurm array (SLU'
        """
        if self.count == 1 or self.launcher not in ("torchrun", "slurm array"):
            return None
        source = ("torchrun's RANK and WORLD_SIZE" if self.launcher == "torchrun" else
                  "the Slurm array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT); to run this task alone, give "
                  "--num-shards 1 or set HF_RALM_IGNORE_SLURM=1")
        return (f"hf-ralm: worker {self.index} of {self.count} (0 to {self.count - 1}), from {source}: it computes "
                f"chunks {self.index}, {self.index + self.count}, ... of the run and shares the output folder with the "
                "other workers.")

    @classmethod
    def resolve(cls, num_shards: int | None = None, shard_id: int | None = None,
                environ: Mapping[str, str] | None = None) -> "Shard":
        """This worker's shard: of the arguments when given, else of the environment (see the module docstring).

        Args:
            num_shards: how many workers share the run.
            shard_id: which of them this one is (needed with more than one shard).
            environ: the environment read otherwise (``os.environ`` by default).

        Returns:
            The shard.

        Raises:
            SettingError: ``num_shards`` is not a count, ``shard_id`` is missing or out of range, or the
                environment's numbers make no worker of the run.
        """
        environ = os.environ if environ is None else environ
        if num_shards is not None or shard_id is not None:
            check_count("num_shards", 1 if num_shards is None else num_shards)
            count = 1 if num_shards is None else num_shards
            if shard_id is None and count > 1:
                raise SettingError(f"{setting('num_shards')}={count} needs {setting('shard_id')}: which of the "
                                   f"{count} shards this worker computes (0 to {count - 1}).")
            index = shard_id or 0
            if not 0 <= index < count:
                raise SettingError(f"{setting('shard_id')} must be from 0 to {count - 1} ({setting('num_shards')}="
                                   f"{count}), got {index}.")
            return cls(index, count, "arguments")
        number = _environment_numbers(environ)
        if "WORLD_SIZE" in environ and "RANK" in environ:
            local = environ.get("LOCAL_RANK")
            shard = cls(number("RANK"), number("WORLD_SIZE"), "torchrun",
                        None if local is None else number("LOCAL_RANK"))
            where = "torchrun's RANK and WORLD_SIZE"
        elif "SLURM_ARRAY_TASK_ID" in environ and "SLURM_ARRAY_TASK_COUNT" in environ and \
                environ.get("HF_RALM_IGNORE_SLURM", "") in ("", "0"):
            first = number("SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in environ else 0
            shard = cls(number("SLURM_ARRAY_TASK_ID") - first, number("SLURM_ARRAY_TASK_COUNT"), "slurm array")
            where = "the Slurm array's SLURM_ARRAY_TASK_ID (less SLURM_ARRAY_TASK_MIN) and SLURM_ARRAY_TASK_COUNT"
        else:
            return cls()
        if not 0 <= shard.index < shard.count:
            raise SettingError(f"{where} make this process worker {shard.index} of {shard.count} workers, but a "
                               "worker's number is at least 0 and below the count: fix the launcher's variables, or "
                               f"give {setting('num_shards')} and {setting('shard_id')}.")
        return shard


def _environment_numbers(environ: Mapping[str, str]) -> Callable[[str], int]:
    """``number(name)``: the integer the environment variable ``name`` holds, or a
    [`SettingError`][hf_ralm.errors.SettingError] that names the variable and its value."""
    def number(name: str) -> int:
        try:
            return int(environ[name])
        except ValueError:
            raise SettingError(f"The environment variable {name}={environ[name]!r} is not an integer: a launcher "
                               "(torchrun, accelerate, Slurm) sets it to a worker's number or count; unset it, or give "
                               f"{setting('num_shards')} and {setting('shard_id')}.") from None

    return number


def uncovered(start: int, stop: int, ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """What is left to compute of a chunk when a run resumed with another chunk size saved some of it.

    Args:
        start: the chunk's first position.
        stop: one past its last.
        ranges: the ``[begin, end)`` of the records held.

    Returns:
        The runs of positions of ``[start, stop)`` that none of ``ranges`` covers, in order.

    Examples:
        >>> uncovered(0, 8, [(2, 4), (5, 6)]), uncovered(4, 6, [(0, 8)])
        ([(0, 2), (4, 5), (6, 8)], [])
    """
    runs, position = [], start
    for begin, end in sorted(ranges):
        if end <= position or begin >= stop:
            continue
        if begin > position:
            runs.append((position, begin))
        position = max(position, end)
    if position < stop:
        runs.append((position, stop))
    return runs


def distributed_barrier() -> bool:
    """Wait for every rank when ``torch.distributed`` is initialized (a ``torchrun`` run); whether there were ranks
    to wait for."""
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    if not (dist.is_available() and dist.is_initialized()):
        return False
    dist.barrier()
    return True


def is_writer() -> bool:
    """Whether this process writes a run's merged outputs: rank 0 under ``torch.distributed``, else any (the writes
    are atomic and give the same file whoever makes them)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return True
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
