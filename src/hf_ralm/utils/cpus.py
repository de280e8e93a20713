"""What this process's CPUs offer: how many it may use (what a search or a build should run on, by default;
``os.cpu_count()`` counts the machine's, which a container's CPU quota, a CPU set or a Slurm job may not give this
process), and whether they compute bfloat16 in hardware (without it PyTorch's bfloat16 runs through a path several
times slower than float32's: a model loaded in bfloat16 on such a CPU is warned about).

Example:
    >>> available_cpus() >= 1
    True
"""

from __future__ import annotations

import math
import os
import platform
import warnings
from typing import TYPE_CHECKING

from ..errors import RalmWarning, setting

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
    """Whether this CPU computes bfloat16 in hardware: on x86, AVX512-BF16 or AMX (as PyTorch detects them);
    ``None`` where it cannot be told (another architecture, or a PyTorch without these probes)."""
    import torch  # here: the searches that count CPUs need no torch

    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if platform.machine().lower() not in X86 or None in probes:
        return None
    return any(probe() for probe in probes)


def warn_slow_precision(dtype: torch.dtype, device: torch.device | str, what: str = "the model",
                        name: str = "dtype") -> None:
    """Warn (a :class:`~hf_ralm.errors.RalmWarning`) when ``what`` runs in bfloat16 on an x86 CPU without bfloat16
    instructions (:func:`bfloat16_instructions`): there PyTorch's bfloat16 matrix products take a slow path
    (docs/results.md, "bfloat16 on a CPU without bfloat16 instructions"), while bfloat16 is usually chosen for speed.
    ``name`` is the setting that chose the precision (``dtype``, ``encoder_dtype``).

    Example:
        >>> import torch
        >>> warn_slow_precision(torch.float32, "cpu")   # float32: nothing to say
    """
    import torch

    if dtype != torch.bfloat16 or torch.device(device).type != "cpu" or bfloat16_instructions() is not False:
        return
    warnings.warn(RalmWarning(
        f"{what} runs in bfloat16 on a CPU without bfloat16 instructions (neither AVX512-BF16 nor AMX; PyTorch reports "
        f"{torch.backends.cpu.get_cpu_capability()}), where bfloat16 is several times slower than float32: give "
        f"{setting(name)} float32 to run faster (its results differ from bfloat16's by rounding), or keep bfloat16 "
        "to match results measured in it."), stacklevel=3)
