"""Where a model runs and in which precision, by default: the accelerator when there is one (a CUDA GPU, this
rank's under torchrun or accelerate; an Intel GPU, XPU; an Apple GPU, MPS), else the CPU; with ``"device-default"``,
bfloat16 on a CUDA GPU that has it, float16 on one that does not (float32 for the model families that overflow in
float16), float32 elsewhere (a CPU, where bfloat16 is slower unless the CPU has bf16 instructions, and half precision
moves perplexity). ``"auto"`` is transformers' word: the checkpoint's own precision.

Examples:
    >>> import torch
    >>> resolve_dtype("device-default", torch.device("cpu")), resolve_dtype("bfloat16", torch.device("cpu"))
    (torch.float32, torch.bfloat16)
    >>> resolve_dtype("auto", torch.device("cpu"))   # transformers reads it from the checkpoint's config
    'auto'
    >>> default_device().type in ("cpu", "cuda", "xpu", "mps")
    True
"""

from __future__ import annotations

import os
import warnings

import torch

from transformers.utils import logging

from ..errors import RalmWarning, SettingError, setting
from .dtypes import DEVICE_DEFAULT, DTYPES
from .modeling_utils import model_device

logger = logging.get_logger(__name__)

INDEXED_DEVICES = {"cuda": "CUDA GPU", "xpu": "Intel GPU (XPU)"}
"""The device types PyTorch numbers (``cuda:1``, ``xpu:1``; one per rank under torchrun, indices checked), in the
order [`default_device`][hf_ralm.core.placement.default_device] prefers them, and what they are called."""


def default_device(local_rank: int | None = None) -> torch.device:
    """The accelerator PyTorch sees, else the CPU. A PyTorch built for Apple GPUs that sees none says why it stays on
    the CPU (a logged warning, once).

    Args:
        local_rank: this process's rank on its machine (one GPU per rank); ``None``: the default GPU.

    Returns:
        ``cuda`` (``cuda:<local_rank>``), else ``xpu`` (an Intel GPU; ``xpu:<local_rank>``), else ``mps`` (an Apple
            GPU), else ``cpu``.
    """
    for kind in INDEXED_DEVICES:
        if getattr(torch, kind).is_available():  # torch.cuda, torch.xpu
            return torch.device(kind if local_rank is None else f"{kind}:{local_rank}")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    if torch.backends.mps.is_built():
        logger.warning_once("PyTorch was built with Apple GPU (MPS) support but sees no Apple GPU here (it needs macOS "
                            "12.3+ on Apple silicon or an AMD GPU): running on the CPU.")
    return torch.device("cpu")


def resolve_device(device: str | torch.device) -> torch.device:
    """The device a name names, checked against this machine before anything loads.

    Args:
        device: a device name (``cuda:1``) or a ``torch.device``.

    Returns:
        The ``torch.device``.

    Raises:
        SettingError: PyTorch does not know the name, or this machine has no such device (one line, instead of
            PyTorch's error deep inside loading).

    Examples:
        >>> resolve_device("cpu")
        device(type='cpu')
        >>> resolve_device("gpu")
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: device 'gpu' is not a PyTorch device name: use cuda (cuda:0, cuda:1, ...), xpu, \
mps or cpu, or leave device out to use the accelerator when there is one.
    """
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise SettingError(f"{setting('device')} {str(device)!r} is not a PyTorch device name: use cuda (cuda:0, "
                           f"cuda:1, ...), xpu, mps or cpu, or leave {setting('device')} out to use the accelerator "
                           "when there is one.") from None
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise SettingError(f"{setting('device')} {str(device)!r}: PyTorch sees no CUDA GPU here (torch "
                               f"{torch.__version__}, {build}; CUDA_VISIBLE_DEVICES="
                               f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): leave {setting('device')} out "
                               "to run on the CPU.")
    if resolved.type == "xpu" and not torch.xpu.is_available():
        raise SettingError(f"{setting('device')} {str(device)!r}: PyTorch sees no Intel GPU (XPU) here (torch "
                           f"{torch.__version__}): leave {setting('device')} out to run on the CPU.")
    if resolved.type in INDEXED_DEVICES and resolved.index is not None:
        count = getattr(torch, resolved.type).device_count()
        if resolved.index >= count:
            kind = resolved.type
            raise SettingError(f"{setting('device')} {str(device)!r}: this machine has {count} "
                               f"{INDEXED_DEVICES[kind]}(s), {kind}:0 to {kind}:{count - 1}.")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise SettingError(f"{setting('device')} {str(device)!r}: PyTorch sees no Apple GPU (MPS) here.")
    return resolved


FLOAT16_OVERFLOWS = ("gemma", "t5")
"""Model families (``config.model_type`` prefixes) whose activations overflow float16's range: trained in bfloat16,
they give infinities, then NaN, in float16 (Gemma-3-270M: NaN perplexity where float32 gives 96.7), so
``"device-default"`` never picks float16 for them."""


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device,
                  model_type: str | None = None) -> torch.dtype | str:
    """The precision a model is loaded in.

    Args:
        dtype: one of [`DTYPES`][hf_ralm.core.placement.DTYPES], or a ``torch.dtype``.
        device: where the model runs.
        model_type: the model's family (``config.model_type``).

    Returns:
        The ``torch.dtype``; ``"auto"`` stays ``"auto"``, which transformers resolves to the checkpoint's own
            precision while loading. ``"device-default"`` is bfloat16 on a CUDA GPU that supports it, float16 on
            another CUDA GPU unless the model's family overflows in it
            ([`FLOAT16_OVERFLOWS`][hf_ralm.core.placement.FLOAT16_OVERFLOWS]: then float32, with a warning), float32
            on a CPU (or any other device: an Apple or Intel GPU).

    Raises:
        SettingError: ``dtype`` names no precision.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise SettingError(f"{setting('dtype')} must be one of {', '.join(DTYPES)}, got {dtype!r}.")
    if dtype == "auto":
        return dtype
    if dtype != DEVICE_DEFAULT:
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
    """Where what works beside a model (a reranker) goes.

    Args:
        model: the reader.

    Returns:
        The device of its inputs, or [`default_device`][hf_ralm.core.placement.default_device] for a model without
            weights (on ``meta``).
    """
    device = model_device(model)
    return default_device() if device.type == "meta" else device
