"""hf-ralm's progress bars: tqdm's (``tqdm.auto``: a widget in notebooks), switched off with the rest of the Hugging
Face ecosystem's bars, by ``transformers.utils.logging.disable_progress_bar()`` or ``HF_HUB_DISABLE_PROGRESS_BARS=1``
(``huggingface_hub.utils.disable_progress_bars()``), as well as by each call's own ``show_progress=False``.

Example:
    >>> from transformers.utils import logging
    >>> logging.disable_progress_bar()
    >>> tqdm(range(3), desc="Scoring").disable
    True
    >>> logging.enable_progress_bar()
"""

from __future__ import annotations

from tqdm.auto import tqdm as _tqdm


def bars_enabled() -> bool:
    """Whether the Hugging Face libraries' progress bars are on (transformers' switch, then huggingface_hub's)."""
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging

    return logging.is_progress_bar_enabled() and not are_progress_bars_disabled()


class tqdm(_tqdm):  # noqa: N801 (tqdm's own name, so that a module's bars read as before)
    """``tqdm.auto.tqdm``, disabled also when the Hugging Face progress bars are off (:func:`bars_enabled`)."""

    def __init__(self, *args, disable: bool = False, **kwargs):
        super().__init__(*args, disable=disable or not bars_enabled(), **kwargs)

    def update(self, n: float = 1):
        """tqdm's update, except that in a log (a stream that is no terminal) the update that completes the bar
        prints nothing: ``close()`` prints the final line, which a log would otherwise show twice."""
        if self.total is not None and self.n + n >= self.total and not _is_terminal(getattr(self, "fp", None)):
            self.miniters = float("inf")
        return super().update(n)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False
