"""The GPU suite: every GPU figure in one call of the device tool, its JSON and the tests' log beside it
(gpu_suite.json, gpu_tests.log), rendered into docs/gpu.md (``python -m benchmarks.gpu.gpu_suite --render ...``)."""
