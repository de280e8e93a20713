"""The rows of the tiny tasks (tests/test_lm_eval.py), in the tiny tokenizer's vocabulary: read from the JSONL files
beside this module with the ``json`` dataset builder, whatever the directory lm-eval runs from (a YAML's
``data_files`` would be read from the current directory)."""

from pathlib import Path

import datasets

HERE = Path(__file__).resolve().parent


def _rows(name: str) -> datasets.DatasetDict:
    return datasets.load_dataset("json", data_files={"test": str(HERE / name)})


def rolling(**metadata) -> datasets.DatasetDict:
    """Five documents of 10, 32, 48, 41 and 87 tokens (``text``)."""
    return _rows("rolling.jsonl")


def choices(**metadata) -> datasets.DatasetDict:
    """Six sentences to complete (``context``), four words each to complete them with (``choices``), the right one's
    index (``label``)."""
    return _rows("choices.jsonl")
