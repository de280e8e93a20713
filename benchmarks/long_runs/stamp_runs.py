"""Stamp the committed long runs' chunks that predate checksums (issue 56): hf-ralm uses a chunk only when it carries
its checksum and the digest of its folder's settings, and refuses older ones. Each folder under ``--runs-dir``
(default results) is opened by the store that wrote it, which verifies every older chunk against the folder's
settings with all of its checks (each row's schema, the counts, the records of the chunk's range) and then writes it
again with the same rows, plus its counts, checksum and settings digest
(:meth:`hf_ralm.RecordStore.stamp_older_chunks`). A folder with a chunk that fails is named and left as it was.
Stamping twice stamps nothing more::

    python -m benchmarks.long_runs.stamp_runs
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from benchmarks.bench_setup import RESULTS


def stores() -> dict[str, type]:
    """Which store wrote the records of each folder (a glob under the runs folder), and so checks them."""
    from hf_ralm import RecordStore
    from hf_ralm.reranker_training import RerankDataWriter
    from hf_ralm.selection import CandidateRecordWriter

    return {"scale/*/candidates-k*": CandidateRecordWriter, "gate-margin/*/candidates-k*": CandidateRecordWriter,
            "rerank-tables/*/candidates": CandidateRecordWriter, "rerank-tables/*/*": RecordStore,
            "rerank-data-*": RerankDataWriter}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", default=str(RESULTS))
    runs = Path(parser.parse_args(argv).runs_dir)
    folders = sorted({path.parent.relative_to(runs).as_posix() for path in runs.rglob("chunk-*.json.gz")})
    failed = 0
    for folder in folders:
        store = next((store for pattern, store in stores().items() if fnmatch.fnmatchcase(folder, pattern)), None)
        if store is None:
            print(f"{runs / folder}: no store is known for it: add its pattern to stores()", file=sys.stderr)
            failed += 1
            continue
        try:
            stamped = store.stamp_older_chunks(runs / folder)
        except ValueError as error:  # a chunk failed its checks (OutputFolderError), or the settings did
            print(f"{runs / folder}: not stamped: {error}", file=sys.stderr)
            failed += 1
        else:
            print(f"{runs / folder}: {len(stamped)} chunk(s) verified by {store.__name__} and stamped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
