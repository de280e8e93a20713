"""Loading a Hugging Face dataset by name, the one way every input that may be one (evaluation texts, questions,
corpora) does it: a folder written by ``Dataset.save_to_disk``, else what ``datasets.load_dataset`` loads (a Hub id,
or a local dataset folder, read as a Hub repository is), one split of it.

Examples:
    ```python
    rows = load_hf_dataset("nq_open", split="validation")        # the Hub (or its local cache)
    rows = load_hf_dataset("corpus-saved-with-save_to_disk")     # a local folder
    ```
"""

from __future__ import annotations

import os

from .paths import OFFLINE_HINT


def load_hf_dataset(name_or_path: str, config: str | None = None, split: str | None = None):
    """The ``datasets.Dataset`` of ``name_or_path`` (``config``, ``split``; without a split: ``train``, or the
    dataset's only split). Raises ``FileNotFoundError`` (naming the Hub's offline switch) when it cannot be loaded,
    and ``ValueError`` when the split is not there."""
    import datasets

    try:
        if any(os.path.isfile(os.path.join(name_or_path, f)) for f in ("state.json", "dataset_dict.json")):
            loaded = datasets.load_from_disk(name_or_path)  # written by save_to_disk
        else:
            loaded = datasets.load_dataset(name_or_path, config)
    except Exception as error:  # datasets raises several types for a dataset it cannot find
        raise FileNotFoundError(f"{name_or_path!r} is neither a file nor a loadable Hugging Face dataset "
                                f"({OFFLINE_HINT}): {error}") from error
    if isinstance(loaded, datasets.DatasetDict):
        if split is None:
            split = "train" if "train" in loaded or len(loaded) != 1 else next(iter(loaded))
        if split not in loaded:
            raise ValueError(f"The dataset {name_or_path!r} has the splits {', '.join(loaded)}, not {split!r}.")
        loaded = loaded[split]
    return loaded


DATASET_SHARD = "data-00000-of-00001.arrow"
"""The file name ``Dataset.save_to_disk`` gives a dataset of one shard."""


def finish_saved_dataset(folder: str) -> None:
    """Make ``folder``, which holds one Arrow file written by ``datasets``' ``ArrowWriter``
    ([`DATASET_SHARD`][hf_ralm.utils.datasets_io.DATASET_SHARD]), a dataset folder ``datasets.load_from_disk`` opens:
    the ``state.json`` and ``dataset_info.json`` that ``Dataset.save_to_disk`` writes beside its shards, written as it
    writes them. ``save_to_disk`` would copy the file through a memory map, which leaves every page of it in the
    process's resident memory (as large as the file: 13 GB for the passages of 21M) until the map is closed; this writes
    the two small files and copies nothing.

    Examples:
        ```python
        with ArrowWriter(features=features, path=os.path.join(folder, DATASET_SHARD)) as writer:
            ...  # writer.write(row) for each row, then writer.finalize()
        finish_saved_dataset(folder)
        datasets.load_from_disk(folder)
        ```
    """
    import json

    from datasets import Dataset
    from datasets.utils.py_utils import asdict  # datasets' own: the fields that are not None

    dataset = Dataset.from_file(os.path.join(folder, DATASET_SHARD))
    state = {key: dataset.__dict__[key]
             for key in ("_fingerprint", "_format_columns", "_format_kwargs", "_format_type", "_output_all_columns")}
    state["_split"] = None if dataset.split is None else str(dataset.split)
    state["_data_files"] = [{"filename": DATASET_SHARD}]
    info = asdict(dataset.info)
    with open(os.path.join(folder, "state.json"), "w", encoding="utf-8") as f:
        json.dump(state, f, indent=2, sort_keys=True)
    with open(os.path.join(folder, "dataset_info.json"), "w", encoding="utf-8") as f:
        json.dump({key: info[key] for key in sorted(info)}, f, indent=2)  # its first level sorted, as datasets does
