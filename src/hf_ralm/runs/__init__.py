"""Long runs that resume, shard and never lose work: the record store (``store``: gzip'd JSON chunks
written atomically and fsynced, checked when read), the one run harness every long run goes through
(``harness``: [`ChunkRun`][hf_ralm.ChunkRun]), a worker's part of a run
(``shards``) and the locks that keep two processes apart (``locks``).

Examples:
    ```python
    from hf_ralm.runs.harness import ChunkRun, RunOptions
    ```
"""
