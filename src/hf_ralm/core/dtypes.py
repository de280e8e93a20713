"""The names of the precisions a model may be loaded in, in plain Python (torch is not imported): what
[`hf_ralm.core.placement`][hf_ralm.core.placement] resolves to a ``torch.dtype`` and what the command line offers as
``--dtype`` choices before it loads anything (``hf-ralm eval-lm --help``).

Examples:
    >>> DTYPES
    ('auto', 'device-default', 'bfloat16', 'float16', 'float32')
    >>> COMMAND_LINE_DTYPES["auto"]   # the command line's auto: hf-ralm's choice for the device
    'device-default'
"""

from __future__ import annotations

DEVICE_DEFAULT = "device-default"
"""hf-ralm's precision for the device the model runs on ([`resolve_dtype`][hf_ralm.core.placement.resolve_dtype]): what
``from_pretrained`` loads in when no ``dtype`` is given, and what the command line's ``--dtype auto`` means
([`COMMAND_LINE_DTYPES`][hf_ralm.core.dtypes.COMMAND_LINE_DTYPES])."""

DTYPES = ("auto", DEVICE_DEFAULT, "bfloat16", "float16", "float32")
"""The precisions a model may be loaded in: ``"auto"`` is transformers' (the checkpoint's own, its config's
``dtype``), ``"device-default"`` hf-ralm's choice for the device."""

COMMAND_LINE_DTYPES = {"auto": DEVICE_DEFAULT, "bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}
"""``--dtype`` of the command line and the ``dtype`` it loads with: its ``auto`` is hf-ralm's choice for the device
(as it was before the library's ``"auto"`` took transformers' meaning), the others are the precision they name."""
