"""The checks of counts and numbers that settings and arguments share, with messages that name the argument.

Example:
    >>> check_count("stride", 4)
    >>> is_finite_number(2.0), is_finite_number(float("nan")), is_finite_number(True)
    (True, False, False)
"""

from __future__ import annotations

import math

from ..errors import SettingError, setting


def check_count(name: str, value: int, minimum: int = 1) -> None:
    """Raise a :class:`~hf_ralm.errors.SettingError` that names the argument unless ``value`` is an integer of at
    least ``minimum``.

    Example:
        >>> check_count("stride", 0)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: stride must be at least 1, got 0.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingError(f"{setting(name)} must be an integer, got {value!r}.")
    if value < minimum:
        raise SettingError(f"{setting(name)} must be at least {minimum}, got {value}.")


def is_number(value) -> bool:
    """A real number (an int or a float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value) -> bool:
    """A real number that is neither infinite nor NaN."""
    return is_number(value) and math.isfinite(value)
