"""The checks of counts and numbers that settings and arguments share, with messages that name the argument.

Example:
    >>> check_count("stride", 4)
    >>> is_finite_number(2.0), is_finite_number(float("nan")), is_finite_number(True)
    (True, False, False)
"""

from __future__ import annotations

import math


def check_count(name: str, value: int, minimum: int = 1) -> None:
    """Raise a ``ValueError`` that names the argument unless ``value`` is an integer of at least ``minimum``.

    Example:
        >>> check_count("stride", 0)
        Traceback (most recent call last):
        ...
        ValueError: stride must be at least 1, got 0.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}.")


def is_number(value) -> bool:
    """A real number (an int or a float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value) -> bool:
    """A real number that is neither infinite nor NaN."""
    return is_number(value) and math.isfinite(value)
