"""Speed and memory benchmarks: each times hf-ralm's path against a reference or alternative side by side in one run
and prints its figures (``python benchmarks/speed/bench_speed.py``; the index: benchmarks/README.md)."""
