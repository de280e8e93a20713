"""Batch sizes, fixed or ``"auto"``: an automatic batch size starts high on a GPU and halves whenever a batch runs
out of memory, the batch then run again (as accelerate's ``find_executable_batch_size`` does), and keeps the size that
fits for the batches after it.

The batch size moves a run's figures only in their last digits (a batch's padded inputs sum in another order), so a
run records it with its settings: a fixed size must stay the same to resume, while ``"auto"`` is recorded as
``"auto"`` (a resume after an out-of-memory error, whatever size it reached, needs no ``overwrite``) and each chunk
of records keeps the size it was computed with.

Examples:
    >>> import torch
    >>> sizes = BatchSize("auto", torch.device("cpu"))
    >>> sizes.size, BatchSize(4, "cpu").setting, sizes.setting
    (8, 4, 'auto')
    >>> def square_all(batch):
    ...     if len(batch) > 2: raise torch.OutOfMemoryError("CUDA out of memory")
    ...     return [x * x for x in batch]
    >>> sizes.map([1, 2, 3, 4, 5], square_all), sizes.size   # 8 did not fit, nor 4: 2 did
    ([1, 4, 9, 16, 25], 2)
"""

from __future__ import annotations

import gc
from typing import Callable, Sequence, TypeVar

import torch
from transformers.utils import logging

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..errors import SettingError, setting
from ..utils.checks import check_count

logger = logging.get_logger(__name__)

AUTO = "auto"
AUTO_START = {"cuda": 64, "cpu": DEFAULT_BATCH_SIZE}
"""Where ``"auto"`` starts: high on a GPU (halved until it fits); on a CPU, the fixed default, which memory never
limits at the sizes of this library's models (and a CPU that runs out of memory is rarely asked again)."""

T = TypeVar("T")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether an error says a device ran out of memory.

    Args:
        error: the error.

    Returns:
        True for CUDA's out-of-memory error, or the CPU allocator's.
    """
    if isinstance(error, torch.OutOfMemoryError):
        return True
    message = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in message or "can't allocate memory" in message)


def parse_batch_size(value: str | int) -> int | str:
    """A batch size as the command line gives it.

    Args:
        value: a count (or its text), or ``"auto"``.

    Returns:
        The count, or ``"auto"``.

    Raises:
        SettingError: it is neither a count of at least 1 nor ``"auto"``.

    Examples:
        >>> parse_batch_size("16"), parse_batch_size("auto")
        (16, 'auto')
    """
    if value == AUTO:
        return AUTO
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise SettingError(f"{setting('batch_size')} must be a count or auto, got {value!r}.") from None
    if size < 1:
        raise SettingError(f"{setting('batch_size')} must be at least 1 (or auto), got {size}.")
    return size


class BatchSize:
    """The batch size of a run, fixed or ``"auto"`` (halved on out-of-memory).

    Args:
        value: a count, or ``"auto"``: start at [`AUTO_START`][hf_ralm.core.batching.AUTO_START] for ``device``'s
            type and halve the size whenever a batch runs out of memory.
        device: the device the batches run on (its type picks where ``"auto"`` starts).
        start: where ``"auto"`` starts instead (benchmarks/gpu/gpu_suite.py starts high to run out of memory once);
            a fixed ``value`` ignores it.

    Attributes:
        size: the batch size in use (``"auto"``'s shrinks as batches run out of memory).
        setting: what the run's settings record: the count, or ``"auto"``.
        auto: whether the size halves on out-of-memory.

    Raises:
        SettingError: ``value`` is neither a count of at least 1 nor ``"auto"``, or ``start`` is not a count.

    Examples:
        >>> BatchSize("auto", "cuda", start=1024).size, BatchSize(4, "cuda", start=1024).size
        (1024, 4)
    """

    def __init__(self, value: int | str, device: str | torch.device, *, start: int | None = None):
        value = parse_batch_size(value)
        self.auto = value == AUTO
        self.setting = value
        if start is not None:
            check_count("start", start)
        default = AUTO_START.get(torch.device(device).type, AUTO_START["cpu"]) if start is None else start
        self.size = default if self.auto else value

    def run(self, work: Callable[[int], T]) -> T:
        """``work(size)``; with ``"auto"``, again with half the size after each out-of-memory error (down to 1).

        Args:
            work: runs one batch of the size it is given.

        Returns:
            What ``work`` returned for the first size that fitted.

        Raises:
            Exception: what ``work`` raised, other than out-of-memory under ``"auto"`` above a size of 1.
        """
        while True:
            try:
                return work(self.size)
            except Exception as error:
                if not (self.auto and is_out_of_memory(error)) or self.size == 1:
                    raise
                del error  # its traceback holds the failed batch's tensors
                self._free()
                self.size //= 2
                logger.warning("Out of memory: going on with batches of %d.", self.size)

    def map(self, items: Sequence, work: Callable[[Sequence], list[T]]) -> list[T]:
        """``work`` over ``items`` in batches of ``size``, each batch run with
        [`run`][hf_ralm.BatchSize.run] (so under ``"auto"`` a batch that runs out of memory is split).

        Args:
            items: what the batches are cut from.
            work: maps one batch of items to one result per item.

        Returns:
            The results of all the batches, joined in the order of ``items``.
        """
        results: list[T] = []
        while len(results) < len(items):
            begin = len(results)
            results += self.run(lambda size: work(items[begin : begin + size]))
        return results

    @staticmethod
    def _free() -> None:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
