"""How many CPUs this process may use: what a search or a build should run on, by default. ``os.cpu_count()`` counts
the machine's, which a container's CPU quota, a CPU set or a Slurm job may not give this process.

Example:
    >>> available_cpus() >= 1
    True
"""

from __future__ import annotations

import math
import os


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
