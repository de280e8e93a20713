"""The results tables of docs/results.md: the scripts that run the reader passes (resumable, their records under
results/) and print each table (``python benchmarks/tables/scale_tables.py``; the index: benchmarks/README.md)."""
