"""Loading a Hugging Face dataset by name, the one way every input that may be one (evaluation texts, questions,
corpora) does it: a folder written by ``Dataset.save_to_disk``, else what ``datasets.load_dataset`` loads (a Hub id,
or a local dataset folder, read as a Hub repository is), one split of it.

Example::

    rows = load_hf_dataset("nq_open", split="validation")        # the Hub (or its local cache)
    rows = load_hf_dataset("corpus-saved-with-save_to_disk")     # a local folder
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
