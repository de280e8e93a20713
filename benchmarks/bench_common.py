"""What the benchmark scripts share: the machine they report and how they time on it."""

from __future__ import annotations

import os
import platform
import sys
import time

import torch

from hf_ralm.utils import bfloat16_instructions


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resident_bytes() -> dict[str, int]:
    """This process's resident memory now (``"now"``) and at its peak so far (``"peak"``), in bytes, from Linux's
    /proc (0 where a field is missing)."""
    fields = {"VmRSS": 0, "VmHWM": 0}
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in fields:
                fields[key] = int(value.split()[0]) * 1024
    return {"now": fields["VmRSS"], "peak": fields["VmHWM"]}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{device.type} ({name})"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def environment(command: str, device: torch.device) -> dict:
    """What every benchmark reports about the run: its command line, versions, threads, device and, on a CPU, whether
    it computes bfloat16 in hardware (:func:`hf_ralm.utils.bfloat16_instructions`; ``None``: cannot be told)."""
    import transformers

    return {
        "command": command,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "device": device_name(device),
        # bfloat16 figures on a CPU depend on it: several times slower, and other roundings, without these instructions
        "bfloat16_instructions": None if device.type != "cpu" else bfloat16_instructions(),
    }


def timed(name: str, fn, warmup, device: torch.device):
    """One warm-up, then the timed run (``time.perf_counter``, inference mode, the device synchronised); returns
    ``fn``'s result and the seconds."""
    print(f"[bench] {name}: warm-up ...", file=sys.stderr, flush=True)
    with torch.inference_mode():
        warmup()
    synchronize(device)
    print(f"[bench] {name}: timing ...", file=sys.stderr, flush=True)
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = fn()
        synchronize(device)
        seconds = time.perf_counter() - t0
    print(f"[bench] {name}: {seconds:.2f} s", file=sys.stderr, flush=True)
    return out, seconds
