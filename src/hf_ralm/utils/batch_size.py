"""hf-ralm's default batch size, in plain Python (neither torch nor transformers), so that every layer and the
command line's ``--batch-size`` read the same number.

Examples:
    >>> from hf_ralm.utils.batch_size import DEFAULT_BATCH_SIZE
    >>> DEFAULT_BATCH_SIZE
    8
"""

DEFAULT_BATCH_SIZE = 8
"""Inputs per forward pass when a call is not told (windows, ranking inputs, continuations, prompts, questions), and
where an automatic batch size starts on a CPU ([`AUTO_START`][hf_ralm.core.batching.AUTO_START])."""
