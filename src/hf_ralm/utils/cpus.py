"""What this process's CPUs offer: how many it may use (what a search or a build should run on, by default;
``os.cpu_count()`` counts the machine's, which a container's CPU quota, a CPU set or a Slurm job may not give this
process), and whether they compute bfloat16 in hardware. Without it, PyTorch's bfloat16 matrix products take a path
several times slower than float32's, so a model hf-ralm loads in bfloat16 on such a CPU gets its linear layers
widened ([`widen_bfloat16_matmuls`][hf_ralm.utils.widened_linear.widen_bfloat16_matmuls]): the product computed in
    float32 and rounded
back to bfloat16, as the hardware paths do, at float32's speed.

Examples:
    >>> available_cpus() >= 1
    True
"""

from __future__ import annotations

import math
import os
import platform
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

X86 = ("x86_64", "amd64", "i386", "i686")


def available_cpus() -> int:
    """The fewest of: the CPUs this process may run on (its affinity: CPU sets, ``taskset``, Slurm's binding), the
    cgroup's CPU quota (``cpu.max``, e.g. ``docker --cpus``), and ``SLURM_CPUS_PER_TASK``; at least 1."""
    try:
        counts = [len(os.sched_getaffinity(0))]
    except AttributeError:  # not Linux
        counts = [os.cpu_count() or 1]
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="utf-8") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            counts.append(math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        counts.append(int(slurm))
    return max(1, min(counts))


def bfloat16_instructions() -> bool | None:
    """Whether this CPU computes bfloat16 in hardware.

    Returns:
        On x86, whether it has AVX512-BF16 or AMX (as PyTorch detects them); ``None`` where it cannot be told
            (another architecture, or a PyTorch without these probes).
    """
    import torch  # here: the searches that count CPUs need no torch

    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if platform.machine().lower() not in X86 or None in probes:
        return None
    return any(probe() for probe in probes)


def slow_bfloat16(dtype: torch.dtype, device: torch.device | str) -> bool:
    """Whether ``dtype`` on ``device`` is bfloat16 on an x86 CPU without bfloat16 instructions
    ([`bfloat16_instructions`][hf_ralm.utils.cpus.bfloat16_instructions]), where PyTorch's bfloat16 matrix products are
    several times slower than float32's (docs/results.md, "bfloat16 on a CPU without bfloat16 instructions").

    Examples:
        >>> import torch
        >>> slow_bfloat16(torch.float32, "cpu")
        False
    """
    import torch

    return dtype == torch.bfloat16 and torch.device(device).type == "cpu" and bfloat16_instructions() is False
