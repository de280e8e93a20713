#!/usr/bin/env bash
# The GPU suite of issue 39 §2 (benchmarks/gpu/gpu_suite.py), from the repository alone: no install, no download.
#
#   on the GPU machine, through the device tool, after .ci/gpu_tests.sh in the same call (docs/gpu.md):
#     PYTHONUNBUFFERED=1 PYTHONPATH=src:. bash benchmarks/gpu/gpu_suite.sh --budget-s 360 --out $OUT/gpu_suite.json
#   the same steps with tiny models on the CPU:
#     bash benchmarks/gpu/gpu_suite.sh --device cpu --quick --out /tmp/gpu_suite.json
set -euo pipefail
cd "$(dirname "$0")/../.."
# src: hf_ralm without installing it; .: the benchmarks package. Unbuffered: per-step timings as they happen.
export PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" -m benchmarks.gpu.gpu_suite "$@"
