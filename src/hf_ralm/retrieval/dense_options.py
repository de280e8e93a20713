"""The dense backend's choices in plain Python (neither faiss, numpy nor transformers is imported): what
:mod:`hf_ralm.retrieval.dense` builds with by default and accepts, and what ``hf-ralm index`` offers as its flags'
choices and defaults before it loads anything (``hf-ralm index --help``).

Example:
    >>> DEFAULT_FACTORY, POOLINGS, ENCODER_DTYPES
    ('Flat', ('mean', 'cls'), ('float32', 'bfloat16', 'float16'))
"""

from __future__ import annotations

DEFAULT_FACTORY = "Flat"  # exact inner-product search (IndexFlatIP)
POOLINGS = ("mean", "cls")
ENCODER_DTYPES = ("float32", "bfloat16", "float16")  # the encoder's precision; embeddings are always float32
DEFAULT_ENCODER_DTYPE = ENCODER_DTYPES[0]  # also the precision of indexes from before the dtype was recorded
