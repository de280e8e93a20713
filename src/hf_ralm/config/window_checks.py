"""The checks of the window settings: windows that overlap, and a window that holds a passage and the stride after
it. [`RalmConfig.validate`][hf_ralm.RalmConfig.validate] and [`RalmConfig.check_room`][hf_ralm.RalmConfig.check_room]
run them; the window arithmetic itself is [`hf_ralm.core.windows`][hf_ralm.core.windows]'s.

Examples:
    >>> check_window_overlap(6, 2)
    >>> check_window_overlap(4, 4)
    Traceback (most recent call last):
    ...
    hf_ralm.errors.SettingError: max_length (4) must be larger than stride (4), or windows would skip tokens: lower \
stride or raise max_length.
"""

from __future__ import annotations

from ..errors import SettingError, setting


def check_window_overlap(max_length: int, stride: int, stride_name: str = "stride") -> None:
    """Check that windows of ``max_length`` tokens that start every ``stride`` tokens overlap; otherwise tokens
    between two windows would never be scored.

    Args:
        max_length: the window length.
        stride: the tokens between two windows' starts.
        stride_name: the setting the caller calls its stride, as the message names it.

    Raises:
        SettingError: ``max_length <= stride``.
    """
    if max_length <= stride:
        raise SettingError(
            f"{setting('max_length')} ({max_length}) must be larger than {setting(stride_name)} ({stride}), or windows "
            f"would skip tokens: lower {setting(stride_name)} or raise {setting('max_length')}."
        )


def check_prefix_room(max_length: int, prefix_length: int, stride: int, bound: str, bound_value: int,
                      *, model_max: int | None = None) -> None:
    """Check that a window holds a passage prefix and the stride after it (``prefix_length + stride <= max_length``).

    Then a passage never covers a scored token in evaluation (every window with retrieval holds ``max_length - stride``
    tokens before its scored ones) and leaves room in every generation context for the stride being generated.

    Args:
        max_length: the window length.
        prefix_length: the prefix's tokens.
        stride: ``retrieval_stride``.
        bound: the setting that cut the prefix (``"max_doc_tokens"``, or ``"max_context_doc_tokens"`` for several
            passages).
        bound_value: its value.
        model_max: the model's maximum length, when that is what ``max_length`` is (the fix is then a shorter
            passage).

    Raises:
        SettingError: the window cannot hold them; the message says what to lower or raise, and to what.

    Examples:
        >>> check_prefix_room(512, 256, 4, "max_doc_tokens", 256)
        >>> check_prefix_room(16, 40, 4, "max_doc_tokens", 256)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: max_length (16) cannot hold a passage of 40 tokens (max_doc_tokens: 256) and the \
retrieval_stride (4) tokens after it: lower max_doc_tokens to at most 12 or raise max_length to at least 44.
    """
    if prefix_length + stride <= max_length:
        return
    shorter = f"lower {setting(bound)} to at most {max_length - stride}"
    if model_max is None:
        where = f"{setting('max_length')} ({max_length})"
        fix = f"{shorter} or raise {setting('max_length')} to at least {prefix_length + stride}"
    else:
        where, fix = f"The model's maximum length ({model_max})", shorter
    what = "a passage" if bound == "max_doc_tokens" else "the passages"
    raise SettingError(f"{where} cannot hold {what} of {prefix_length} tokens ({setting(bound)}: {bound_value}) and "
                       f"the {setting('retrieval_stride')} ({stride}) tokens after it: {fix}.")
