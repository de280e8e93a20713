"""hf-ralm's benchmarks and results scripts: each measures something a doc quotes, printing its figures (ratios
measured side by side in one run). Run one from the repository root as a file or as a module, after the README's
set-up (an editable install, which puts the repository root on the import path)::

    python benchmarks/speed/bench_speed.py
    python -m benchmarks.tables.rerank_tables --max-eval-tokens 1024

They are in folders by purpose (speed/, tables/, figures/, gpu/, data/, long_runs/; the index: benchmarks/README.md)
and import the library (the window plan, the record store, the selection policy) and each other as the
``benchmarks`` package (``benchmarks.bench_setup``, ``benchmarks.tables.results_csv``); nothing here is shipped in
the hf-ralm wheel. Their run records are under results/.
"""
