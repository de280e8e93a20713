"""The evaluation's defaults in plain Python (nothing heavy is imported): what the evaluation runs with when no value
is given, and what the command line shows as its flags' defaults before it loads anything (``hf-ralm eval-lm
--help``).

Examples:
    >>> CHUNK_SIZE
    256
"""

from __future__ import annotations

CHUNK_SIZE = 256
"""Windows per chunk by default (1,024 tokens at s=4): what an interrupted run can lose at most, and how many windows
are retrieved, ranked and scored together."""
