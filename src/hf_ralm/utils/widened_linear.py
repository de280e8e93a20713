"""bfloat16 linear layers computed in float32, for CPUs without bfloat16 instructions
([`slow_bfloat16`][hf_ralm.utils.cpus.slow_bfloat16]): there PyTorch's bfloat16 matrix products are several times slower
than float32's, and widening the operands keeps bfloat16's results (to its rounding) at float32's speed
(docs/results.md, "bfloat16 on a CPU without bfloat16 instructions").

Examples:
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 2)).to(torch.bfloat16)
    >>> widen_bfloat16_matmuls(model)
    1
    >>> model(torch.ones(1, 4, dtype=torch.bfloat16)).dtype
    torch.bfloat16
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .cpus import slow_bfloat16


class WidenedLinear(torch.nn.Linear):
    """A bfloat16 ``Linear`` whose product runs in float32 on the CPU: input, weight and bias widened to float32, the
    result rounded back to bfloat16. Its weights stay bfloat16 (no float32 copy is kept); an input on another device,
    or not in bfloat16, runs PyTorch's own kernel."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if input.device.type != "cpu" or input.dtype != torch.bfloat16:
            return super().forward(input)
        bias = None if self.bias is None else self.bias.float()
        return F.linear(input.float(), self.weight.float(), bias).to(torch.bfloat16)


def widen_bfloat16_matmuls(model: torch.nn.Module) -> int:
    """Compute a model's bfloat16 linear layers in float32, rounding their outputs back to bfloat16.

    What comes out is bfloat16, as from PyTorch's own bfloat16 kernels, which also add in float32 and round once: the
    two differ by that rounding only (one element in about 10,000, by one bfloat16 step, measured on a layer of
    SmolLM2's size). hf-ralm does this to the models it loads in bfloat16 on a CPU without bfloat16 instructions; call
    it on a model of your own to do the same.

    Args:
        model: the model, changed in place: its bfloat16 ``torch.nn.Linear`` layers become
            [`WidenedLinear`][hf_ralm.utils.widened_linear.WidenedLinear] (state dict, parameters and saving
            unchanged). Subclasses of ``Linear`` (quantized layers and the like) are left as they are, and so are
            layers that are not ``Linear`` (GPT-2's ``Conv1D``).

    Returns:
        How many layers were widened.
    """
    widened = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear and module.weight.dtype == torch.bfloat16:
            module.__class__ = WidenedLinear
            widened += 1
    return widened


def widen_where_bfloat16_is_slow(model: torch.nn.Module) -> int:
    """Widen a model's bfloat16 linear layers where bfloat16 is slow: what ``from_pretrained`` and the dense encoder do
    to the models they load.

    Args:
        model: the model.

    Returns:
        The layers [`widen_bfloat16_matmuls`][hf_ralm.utils.widened_linear.widen_bfloat16_matmuls] widened when the
            model (its first parameter) is bfloat16 on a CPU without bfloat16 instructions
            ([`slow_bfloat16`][hf_ralm.utils.cpus.slow_bfloat16]), else 0.
    """
    first = next(model.parameters(), None)
    if first is None or not slow_bfloat16(first.dtype, first.device):
        return 0
    return widen_bfloat16_matmuls(model)
