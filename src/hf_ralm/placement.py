"""Where a model runs and in which precision, by default: the GPU when there is one (this rank's, under torchrun or
accelerate), else the CPU; bfloat16 on a GPU that has it, float16 on one that does not, float32 on a CPU (where
bfloat16 is slower unless the CPU has bf16 instructions, and half precision moves perplexity).

Example:
    >>> import torch
    >>> resolve_dtype("auto", torch.device("cpu")), resolve_dtype("bfloat16", torch.device("cpu"))
    (torch.float32, torch.bfloat16)
    >>> default_device().type in ("cpu", "cuda")
    True
"""

from __future__ import annotations

import torch

from .errors import SettingError, setting
from .modeling_utils import model_device

DTYPES = ("auto", "bfloat16", "float16", "float32")
"""The precisions a model may be loaded in; ``auto`` is :func:`resolve_dtype`'s choice for the device."""


def default_device(local_rank: int | None = None) -> torch.device:
    """``cuda`` (``cuda:<local_rank>``: one GPU per rank) when a GPU is there, else ``cpu``."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda" if local_rank is None else f"cuda:{local_rank}")


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device) -> torch.dtype:
    """The precision ``dtype`` names (one of :data:`DTYPES`, or a ``torch.dtype``); ``"auto"``: bfloat16 on a GPU
    that supports it, float16 on another GPU, float32 on a CPU (or any other device)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise SettingError(f"{setting('dtype')} must be one of {', '.join(DTYPES)}, got {dtype!r}.")
    if dtype != "auto":
        return getattr(torch, dtype)
    device = torch.device(device)
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def working_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s inputs, or :func:`default_device` for a model without weights (on ``meta``): where
    what works beside it (a reranker) goes."""
    device = model_device(model)
    return default_device() if device.type == "meta" else device
