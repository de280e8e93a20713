"""Long runs that resume, shard and never lose work: the record store (:mod:`.store`: gzip'd JSON chunks written
atomically and fsynced, checked when read), the one run harness every long run goes through (:mod:`.harness`:
:class:`~hf_ralm.runs.harness.ChunkRun`), a worker's part of a run (:mod:`.shards`) and the locks that keep two
processes apart (:mod:`.locks`).

Example::

    from hf_ralm.runs.harness import ChunkRun, RunOptions
"""
