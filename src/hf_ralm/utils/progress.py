"""hf-ralm's progress bars: tqdm's (``tqdm.auto``: a widget in notebooks), switched off with the rest of the Hugging
Face ecosystem's bars, by ``transformers.utils.logging.disable_progress_bar()`` or ``HF_HUB_DISABLE_PROGRESS_BARS=1``
(``huggingface_hub.utils.disable_progress_bars()``), as well as by each call's own ``show_progress=False``.

Two rules hold for every bar, so that callers need not know where their output goes:

- **One bar per stage.** A bar opened while another one's [`tqdm.share`][hf_ralm.utils.progress.tqdm.share] is open (a
  run's chunk of windows, in which a chunk's reranking or scoring opens a bar of its own) shows no bar of its own: one
  that counts what the outer bar counts (its unit) advances the outer bar, up to the share's positions; another (e.g.
  the chunk's retrieval) names itself at the end of the outer bar's line while it runs.
- **Plain lines in a log.** On a stream that is no terminal (stderr redirected to a file, CI) a bar prints whole
  lines, no carriage returns or cursor moves: one when it starts, then at most one every
  [`LOG_INTERVAL_S`][hf_ralm.utils.progress.LOG_INTERVAL_S] seconds as it moves, and its last line once when it closes.
- **Never silent for long.** A bar that has shown nothing for [`SILENCE_S`][hf_ralm.utils.progress.SILENCE_S] seconds
  (one step that takes long: a batch of windows on a busy CPU) shows its line again, its elapsed time moving, from a
  background thread.

Examples:
    >>> from transformers.utils import logging
    >>> logging.disable_progress_bar()
    >>> tqdm(range(3), desc="Scoring").disable
    True
    >>> logging.enable_progress_bar()
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from tqdm.auto import tqdm as _tqdm
from tqdm.std import tqdm as _std_tqdm

LOG_INTERVAL_S = 5.0
"""At most one line per bar every this many seconds on a stream that is no terminal (a log): a line every 0.1 s,
tqdm's rate for a terminal, fills a log; one a minute leaves it silent for as long."""

SILENCE_S = 8.0
"""A shown bar that has displayed nothing for this many seconds displays its line again (its elapsed time moved):
no stage is silent for ten seconds, however long one of its steps takes."""

_IN_PLACE = _tqdm.display is not _std_tqdm.display  # a notebook's widget: it draws itself, not on a stream
_shares = threading.local()  # .open: the bars whose share() is open in this thread, innermost last


def bars_enabled() -> bool:
    """Whether the Hugging Face libraries' progress bars are on (transformers' switch, then huggingface_hub's)."""
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging

    return logging.is_progress_bar_enabled() and not are_progress_bars_disabled()


class tqdm(_tqdm):  # noqa: N801 (tqdm's own name, so that a module's bars read as before)
    """``tqdm.auto.tqdm``, disabled also when the Hugging Face progress bars are off
    ([`bars_enabled`][hf_ralm.utils.progress.bars_enabled]), with plain lines in a log and no bar inside another's
    [`share`][hf_ralm.utils.progress.tqdm.share] (see the module docstring)."""

    def __init__(self, *args, disable: bool = False, **kwargs):
        disable = disable or not bars_enabled()
        open_shares = getattr(_shares, "open", [])
        self._outer: tqdm | None = open_shares[-1] if open_shares and not disable else None
        self._label, self._unit = kwargs.get("desc") or "", kwargs.get("unit", "it")
        self._done = 0  # what a bar inside a share has counted (a disabled tqdm counts nothing itself)
        self._plain = not _IN_PLACE and not _is_terminal(kwargs.get("file") or sys.stderr)
        self._shown: tuple | None = None  # the count and postfix of the last line printed in a log
        self._shown_at = time.monotonic()  # when this bar last displayed anything
        if self._plain:
            kwargs.setdefault("mininterval", LOG_INTERVAL_S)
        super().__init__(*args, disable=disable or self._outer is not None, **kwargs)
        if not self.disable:
            _Heartbeat.watch()
        if self._outer is not None and self._unit != self._outer.unit:
            self._outer.set_postfix_str(self._label)  # the outer bar's line says what runs now

    @contextmanager
    def share(self, n: int) -> Iterator[None]:
        """The next ``n`` positions of this bar are done by what runs inside: bars opened there advance this one (or
        name themselves on its line) instead of showing; at the end it stands ``n`` positions further.

        Examples:
            >>> import io
            >>> run = tqdm(total=4, desc="Scoring candidates", unit="win", file=io.StringIO())
            >>> with run.share(4):
            ...     with tqdm(total=4, desc="Reranking", unit="win") as chunk:
            ...         chunk.update(3)
            ...         run.n
            3
            >>> run.n
            4
        """
        if self.disable:
            yield
            return
        _shares.open = [*getattr(_shares, "open", []), self]
        self._share_end = self.n + n
        try:
            yield
        finally:
            _shares.open = _shares.open[:-1]
            if self.n < self._share_end:
                self.update(self._share_end - self.n)

    def update(self, n: float = 1):
        """tqdm's update; inside an outer bar's share, the outer bar's (same unit) or nothing shown."""
        if self._outer is not None:
            self._done += n
            outer = self._outer
            if self._unit == outer.unit and outer.n < outer._share_end:
                return outer.update(min(n, outer._share_end - outer.n))
            return None
        return super().update(n)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        """tqdm's display; in a log a whole line (nothing for tqdm's clearing, ``msg=''``), never the same count
        twice (for the same stage)."""
        if not self._plain:
            self._shown_at = time.monotonic()
            return super().display(msg, pos)
        quiet_for = time.monotonic() - self._shown_at
        if msg == "" or (msg is None and (self.n, self.postfix) == self._shown and quiet_for < SILENCE_S):
            return False
        self.fp.write((str(self) if msg is None else msg) + "\n")
        self.fp.flush()
        self._shown_at = time.monotonic()
        if msg is None:
            self._shown = (self.n, self.postfix)
        return True

    def clear(self, nolock: bool = False) -> None:
        """tqdm's clear, but in a log, where a printed line stays."""
        if not self._plain:
            super().clear(nolock)

    def close(self) -> None:
        """tqdm's close: in a log the last line is printed (once) and kept; inside a share, the outer bar's line no
        longer names this one."""
        if self._outer is not None:
            if self._unit != self._outer.unit:
                self._outer.set_postfix_str("", refresh=False)
            self._outer = None
        elif self._plain and not self.disable:
            self._ema_dt = lambda: None  # the last line's rate is the whole run's, as tqdm's own last line
            with self._lock:
                self.display()
            self.leave = False  # printed: tqdm's close has nothing more to write
        super().close()


class _Heartbeat:
    """The one background thread that redisplays the shown bars quiet for
    [`SILENCE_S`][hf_ralm.utils.progress.SILENCE_S] seconds (started with the first bar shown; a daemon, so it never
    keeps a process alive)."""

    thread: threading.Thread | None = None
    lock = threading.Lock()

    @classmethod
    def watch(cls) -> None:
        with cls.lock:
            if cls.thread is None or not cls.thread.is_alive():
                cls.thread = threading.Thread(target=cls._run, name="hf-ralm progress", daemon=True)
                cls.thread.start()

    @staticmethod
    def _run() -> None:
        while True:
            time.sleep(min(1.0, SILENCE_S / 4))
            for bar in list(_tqdm._instances):  # the open bars (tqdm removes a bar when it closes)
                if (isinstance(bar, tqdm) and not bar.disable and bar._outer is None
                        and time.monotonic() - bar._shown_at >= SILENCE_S):
                    bar.refresh()


class Pace:
    """How long a stage has left at the rate measured on this machine since the first count given (its load now, not
    an idle machine's): ``seconds_left(done, total)``, once some was done after the first count.

    Examples:
        >>> clock = iter([0.0, 10.0]).__next__   # a fake clock: counting starts at 0 s, 10 s later...
        >>> pace = Pace(clock)
        >>> pace.seconds_left(0, 100), pace.seconds_left(25, 100)   # ... a quarter is done: 30 s left
        (None, 30.0)
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.first: tuple[float, float] | None = None  # (time, count) of the first count given

    def elapsed(self) -> float:
        """Seconds since the first count (0 before it)."""
        return 0.0 if self.first is None else self.clock() - self.first[0]

    def seconds_left(self, done: float, total: float) -> float | None:
        """The seconds the ``total - done`` units left take at the rate since the first count; ``None`` until the
        stage has moved past its first count."""
        now = self.clock()
        if self.first is None:
            self.first = (now, done)
            return None
        start, first_done = self.first
        if done <= first_done or now <= start:
            return None
        return (now - start) * (total - done) / (done - first_done)


def format_duration(seconds: float) -> str:
    """A duration as a person reads it.

    Examples:
        >>> format_duration(42), format_duration(600), format_duration(9000), format_duration(864000)
        ('42 s', '10 min', '2.5 h', '10 days')
    """
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.0f} days"


@contextmanager
def transformers_bars() -> Iterator[None]:
    """transformers' own bars (its "Loading weights") drawn as hf-ralm's while inside (plain lines in a log), through
    its tqdm hook (``transformers.utils.logging.set_tqdm_hook``; nothing where a transformers release lacks it); the
    previous hook is back afterwards. What a command runs under.

    Examples:
        ```python
        with transformers_bars():
            AutoModelForCausalLM.from_pretrained(path)   # "Loading weights: ..." as whole lines in a log
        ```
    """
    from transformers.utils import logging

    set_hook = getattr(logging, "set_tqdm_hook", None)
    if set_hook is None:
        yield
        return
    previous = set_hook(lambda factory, args, kwargs: tqdm(*args, **kwargs) if factory is _tqdm else
                        factory(*args, **kwargs))
    try:
        yield
    finally:
        set_hook(previous)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False
