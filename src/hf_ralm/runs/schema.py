"""The checks of a record type's rows as they read back from JSON: every field of the dataclass there, each value
of its field's type (numbers finite unless told), with a message that names what is wrong where. The record store
(``hf_ralm.runs.store``) runs them on every chunk it reads.

Examples:
    >>> from hf_ralm import Passage
    >>> fields_problem(Passage, {"id": "7", "title": "Rome", "text": "rome was"}, "", finite=True) is None
    True
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from typing import Any


def fields_problem(record_type: type, row: Any, where: str, finite: bool) -> str | None:
    """What keeps ``row`` (read back from JSON) from being a saved ``record_type`` (a dataclass, whose fields' types
    say what each value must be): a field missing or unknown, a value of another type; ``None`` when nothing.

    Args:
        record_type: the dataclass.
        row: the row, as read back from JSON.
        where: where the row is, as the message names it (``""``: the record itself).
        finite: refuse numbers that are not finite.

    Examples:
        >>> from hf_ralm import Passage
        >>> fields_problem(Passage, {"id": "7", "title": "Rome", "text": None}, "", finite=True)
        'text is null, not str'
    """
    if not isinstance(row, dict):
        return f"{where or 'the record'} is {_shown(row)}, not an object"
    fields = dataclasses.fields(record_type)
    missing = [f.name for f in fields if f.name not in row and f.default is f.default_factory is dataclasses.MISSING]
    unknown = sorted(set(row) - {f.name for f in fields})
    if missing or unknown:
        return f"{where or 'the record'} lacks {missing} or has unknown {unknown} fields"
    hints = typing.get_type_hints(record_type)
    return next(filter(None, (value_problem(value, hints[name], f"{where}.{name}" if where else name, finite)
                              for name, value in row.items())), None)


def value_problem(value: Any, hint: Any, where: str, finite: bool) -> str | None:
    """What keeps ``value`` from being of type ``hint`` (see ``fields_problem``;
    types it does not know, such as ``dict``, are not checked)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [option for option in typing.get_args(hint) if value is None or option is not type(None)]
        if len(options) == 1:  # e.g. a list where ``list[float] | None`` is wanted: what is wrong with it as a list
            return value_problem(value, options[0], where, finite)
        fits = any(value_problem(value, option, where, finite) is None for option in options)
        return None if fits else f"{where} is {_shown(value)}, not {_type_name(hint)}"
    if origin is list:
        if not isinstance(value, list):
            return f"{where} is {_shown(value)}, not {_type_name(hint)}"
        item = typing.get_args(hint)[0]
        return next(filter(None, (value_problem(v, item, f"{where}[{i}]", finite) for i, v in enumerate(value))),
                    None)
    if dataclasses.is_dataclass(hint):
        return fields_problem(hint, value, where, finite)
    if hint is float:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and (not finite or math.isfinite(value)):
            return None
        return f"{where} is {_shown(value)}, not a {'finite ' if number else ''}number"
    if hint is int:
        fits = isinstance(value, int) and not isinstance(value, bool)
    elif hint in (str, bool, type(None)):
        fits = isinstance(value, hint)
    else:
        fits = True
    return None if fits else f"{where} is {_shown(value)}, not {_type_name(hint)}"


def _shown(value: Any) -> str:
    """A JSON value as a message shows it (cut to 40 characters)."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_name(hint: Any) -> str:
    """A type as a message names it: ``list[float] | None``, ``Passage``, ``null``."""
    name = hint.__name__ if isinstance(hint, type) else str(hint)
    return re.sub(r"\b(?:\w+\.)+", "", name).replace("NoneType", "null")
