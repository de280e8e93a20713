"""Where a model runs and in which precision, by default: the GPU when there is one (this rank's, under torchrun or
accelerate), else the CPU; bfloat16 on a GPU that has it, float16 on one that does not (float32 for the model families
that overflow in float16), float32 on a CPU (where bfloat16 is slower unless the CPU has bf16 instructions, and half
precision moves perplexity).

Example:
    >>> import torch
    >>> resolve_dtype("auto", torch.device("cpu")), resolve_dtype("bfloat16", torch.device("cpu"))
    (torch.float32, torch.bfloat16)
    >>> default_device().type in ("cpu", "cuda")
    True
"""

from __future__ import annotations

import os
import warnings

import torch

from .errors import RalmWarning, SettingError, setting
from .modeling_utils import model_device

DTYPES = ("auto", "bfloat16", "float16", "float32")
"""The precisions a model may be loaded in; ``auto`` is :func:`resolve_dtype`'s choice for the device."""


def default_device(local_rank: int | None = None) -> torch.device:
    """``cuda`` (``cuda:<local_rank>``: one GPU per rank) when a GPU is there, else ``cpu``."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda" if local_rank is None else f"cuda:{local_rank}")


def resolve_device(device: str | torch.device) -> torch.device:
    """The device ``device`` names, refused in one line (a :class:`~hf_ralm.errors.SettingError`) when PyTorch does
    not know the name or this machine has no such device, instead of PyTorch's error deep inside loading.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
        >>> resolve_device("gpu")
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: device 'gpu' is not a PyTorch device name: use cuda (cuda:0, cuda:1, ...), cpu \
or mps, or leave device out to use the GPU when there is one.
    """
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise SettingError(f"{setting('device')} {str(device)!r} is not a PyTorch device name: use cuda (cuda:0, "
                           f"cuda:1, ...), cpu or mps, or leave {setting('device')} out to use the GPU when there is "
                           "one.") from None
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise SettingError(f"{setting('device')} {str(device)!r}: PyTorch sees no CUDA GPU here (torch "
                               f"{torch.__version__}, {build}; CUDA_VISIBLE_DEVICES="
                               f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): leave {setting('device')} out "
                               "to run on the CPU.")
        if resolved.index is not None and resolved.index >= count:
            raise SettingError(f"{setting('device')} {str(device)!r}: this machine has {count} CUDA GPU(s), "
                               f"cuda:0 to cuda:{count - 1}.")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise SettingError(f"{setting('device')} {str(device)!r}: PyTorch sees no Apple GPU (MPS) here.")
    return resolved


FLOAT16_OVERFLOWS = ("gemma", "t5")
"""Model families (``config.model_type`` prefixes) whose activations overflow float16's range: trained in bfloat16,
they give infinities, then NaN, in float16 (Gemma-3-270M: NaN perplexity where float32 gives 96.7), so ``"auto"``
never picks float16 for them."""


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device, model_type: str | None = None) -> torch.dtype:
    """The precision ``dtype`` names (one of :data:`DTYPES`, or a ``torch.dtype``); ``"auto"``: bfloat16 on a GPU
    that supports it, float16 on another GPU unless the model's family (``model_type``) overflows in it
    (:data:`FLOAT16_OVERFLOWS`: then float32, with a warning), float32 on a CPU (or any other device)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise SettingError(f"{setting('dtype')} must be one of {', '.join(DTYPES)}, got {dtype!r}.")
    if dtype != "auto":
        return getattr(torch, dtype)
    device = torch.device(device)
    if device.type != "cuda":
        return torch.float32
    if torch.cuda.is_bf16_supported():
        return torch.bfloat16
    if model_type and model_type.startswith(FLOAT16_OVERFLOWS):
        warnings.warn(RalmWarning(f"this GPU has no bfloat16 and {model_type} models overflow in float16 (NaN "
                                  f"figures): loading in float32; give {setting('dtype')} float16 to force it."),
                      stacklevel=2)
        return torch.float32
    return torch.float16


def working_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s inputs, or :func:`default_device` for a model without weights (on ``meta``): where
    what works beside it (a reranker) goes."""
    device = model_device(model)
    return default_device() if device.type == "meta" else device
