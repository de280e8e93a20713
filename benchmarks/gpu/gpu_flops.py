"""Model FLOPs and model FLOPs utilisation (MFU) of what a forward pass runs, for benchmarks/gpu/gpu_suite.py.

A path's FLOPs are counted from the :class:`Span` list of what it runs (``FLOPS_METHOD``), so that a passage whose
keys/values are computed once counts once, and MFU is the achieved FLOP/s over the card's dense bfloat16 peak::

    counter = FlopCounter(model)
    mfu = counter([Span(tokens=2048, offset=0, logits=5)]) / seconds / peak_flops(device, torch.bfloat16)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

# dense bfloat16 peaks (no sparsity), the first name a card's name holds
PEAK_BF16_FLOPS = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12))

FLOPS_METHOD = ("per forward: 2 x (parameters but the embeddings and the LM head) per position run, plus 2 x (LM "
                "head parameters) per position whose logits are computed, plus the attention term 4 x (query heads x "
                "head_dim) x (keys attended) per position and layer (QK^T and AV; a sliding-window layer attends to "
                "at most its window); what a path actually runs, so a passage computed once counts once")


@dataclass(frozen=True)
class Span:
    """What one forward runs for one sequence: ``tokens`` positions after ``offset`` cached ones, logits at
    ``logits`` of them."""

    tokens: int
    offset: int
    logits: int


def keys_attended(tokens: int, offset: int, window: int | None) -> int:
    """Keys the positions ``offset + 1 .. offset + tokens`` attend to in all, each at most ``window``.

    Example:
        >>> keys_attended(4, 0, None), keys_attended(4, 2, None), keys_attended(4, 2, 4)
        (10, 18, 15)
    """
    first, last = offset + 1, offset + tokens
    if window is None or last <= window:
        return (first + last) * tokens // 2
    if first > window:
        return window * tokens
    return (first + window) * (window - first + 1) // 2 + window * (last - window)


class FlopCounter:
    """Model FLOPs of :class:`Span` lists for one model (:data:`FLOPS_METHOD`)."""

    def __init__(self, model):
        config = model.config.get_text_config()
        head = model.get_output_embeddings().weight
        skipped = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
        skipped.add(id(head))
        self.params = sum(p.numel() for p in model.parameters())
        self.matmul_params = sum(p.numel() for p in model.parameters() if id(p) not in skipped)
        self.head_params = head.numel()
        heads = config.num_attention_heads
        self.attention_width = heads * (getattr(config, "head_dim", None) or config.hidden_size // heads)
        layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
        self.windows = [config.sliding_window if kind == "sliding_attention" else None for kind in layer_types]
        self.architecture = type(model).__name__
        self.attention = getattr(config, "_attn_implementation", None)

    def __call__(self, spans: Sequence[Span]) -> float:
        total = 0
        for s in spans:
            keys = sum(keys_attended(s.tokens, s.offset, window) for window in self.windows)
            total += (2 * self.matmul_params * s.tokens + 2 * self.head_params * s.logits
                      + 4 * self.attention_width * keys)
        return float(total)

    def describe(self, config_file: str) -> dict:
        return {"config": f"benchmarks/gpu/configs/{config_file}", "architecture": self.architecture,
                "params": self.params, "matmul_params": self.matmul_params, "lm_head_params": self.head_params,
                "layers": len(self.windows), "attention_implementation": self.attention}


def peak_flops(device: torch.device, dtype: torch.dtype) -> float | None:
    """The card's dense bfloat16 peak, for MFU; ``None`` on a CPU, in float32 or on an unknown card."""
    if device.type != "cuda" or dtype != torch.bfloat16:
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in name), None)
