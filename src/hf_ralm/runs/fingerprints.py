"""Short identities of what a run's settings record instead of large inputs: digests of values, token ids and
title sets, and settings as they read back from JSON (so a stored copy compares equal).

Examples:
    >>> ids_fingerprint([1, 2, 3])
    '3 tokens, a36b1f2c3f84522d'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Sequence


def as_json(mapping: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A mapping as it reads back from JSON (tuples become lists), so a stored copy compares equal to it.

    Args:
        mapping: the settings.
        what: what they are, as the message names them.

    Returns:
        The mapping, through JSON and back.

    Raises:
        TypeError: a value is not JSON-serializable.

    Examples:
        >>> as_json({"ends": (4, 8)}, "settings")
        {'ends': [4, 8]}
    """
    try:
        return json.loads(json.dumps(dict(mapping)))
    except TypeError as error:
        raise TypeError(f"The {what} must be JSON-serializable (strings, numbers, lists, dicts): {error}") from None


def digest(value: Any) -> str:
    """A short SHA-256 of a value: what settings record of large inputs.

    Args:
        value: a JSON-serializable value (its keys sorted), or bytes.

    Returns:
        The first 16 hex digits of the SHA-256.

    Raises:
        TypeError: the value is neither bytes nor JSON-serializable.

    Examples:
        >>> digest([1, 2, 3])
        'a36b1f2c3f84522d'
    """
    data = value if isinstance(value, bytes) else json.dumps(value, sort_keys=True).encode("utf-8")
    return hashlib.sha256(data).hexdigest()[:16]


def ids_fingerprint(ids: Sequence[int]) -> str:
    """A short identity of a text's token ids, to record in settings instead of the text.

    Args:
        ids: the token ids.

    Returns:
        Their count and [`digest`][hf_ralm.digest].

    Examples:
        >>> ids_fingerprint([1, 2, 3])
        '3 tokens, a36b1f2c3f84522d'
    """
    return f"{len(ids)} tokens, {digest(list(ids))}"


def titles_fingerprint(titles: Iterable[str]) -> str:
    """A short, order-free identity of a set of titles (forbidden or excluded ones), to record in settings instead of
    the titles themselves.

    Args:
        titles: the titles (repeats count once).

    Returns:
        Their count and the [`digest`][hf_ralm.digest] of the sorted, distinct titles.

    Examples:
        >>> titles_fingerprint(["Nero", "Rome"]) == titles_fingerprint(["Rome", "Nero", "Rome"])
        True
    """
    unique = sorted(set(titles))
    return f"{len(unique)} titles, sha256 {digest(chr(10).join(unique).encode('utf-8'))}"
