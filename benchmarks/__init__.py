"""hf-ralm's benchmarks and results scripts: each measures something a doc quotes, printing its figures (ratios
measured side by side in one run). Run one from the repository root as a file or as a module, after the README's
set-up (an editable install, which puts the repository root on the import path)::

    python benchmarks/bench_speed.py
    python -m benchmarks.rerank_tables --max-eval-tokens 1024

They import the library (the window plan, the record store, the selection policy) and each other as the
``benchmarks`` package; nothing here is shipped in the hf-ralm wheel.
"""
