"""Where a run's time goes: the seconds of retrieval and of the reader, apart.

In-Context RALM asks the retriever every ``s`` tokens and the reader scores or extends every window, so either can
be what a run waits on. ``eval-lm``, ``eval-lm --compare`` and ``generate`` keep a
[`StageTimes`][hf_ralm.utils.stage_times.StageTimes]: their progress bars show it as they go, ``eval.json`` and
``compare.json`` keep its figures, and the command line prints it at the end.

Example:
    >>> times = StageTimes()
    >>> with times.timing("retrieval"):
    ...     pass
    >>> times.reader_s += 2.5
    >>> str(times).endswith("reader 2.5 s")
    True
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Literal

Stage = Literal["retrieval", "reader"]


@dataclass
class StageTimes:
    """The seconds a run spent in retrieval and in the reader, summed over what this process computed (windows
    read back from saved records cost nothing here).

    Attributes:
        retrieval_s: the retriever's searches (and reading passages back from a retrieval file).
        reader_s: the reader's forward passes and what chooses among the passages with them (reranking and gating,
            a trained reranker's scoring included).
    """

    retrieval_s: float = 0.0
    reader_s: float = 0.0

    @contextmanager
    def timing(self, stage: Stage) -> Iterator[None]:
        """Add the seconds the ``with`` block takes to ``stage`` (``"retrieval"`` or ``"reader"``)."""
        if stage not in ("retrieval", "reader"):
            raise ValueError(f"stage must be 'retrieval' or 'reader', got {stage!r}")
        start = time.perf_counter()
        try:
            yield
        finally:
            name = f"{stage}_s"
            setattr(self, name, getattr(self, name) + time.perf_counter() - start)

    def to_dict(self) -> dict[str, float]:
        """``{"retrieval_s": ..., "reader_s": ...}``, as ``eval.json`` and ``compare.json`` keep them."""
        return {"retrieval_s": self.retrieval_s, "reader_s": self.reader_s}

    def __str__(self) -> str:
        """``"retrieval <seconds> s, reader <seconds> s"`` (one decimal): what a bar and the command line show."""
        return f"retrieval {self.retrieval_s:.1f} s, reader {self.reader_s:.1f} s"
