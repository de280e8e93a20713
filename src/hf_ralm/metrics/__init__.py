"""``evaluate`` metrics shipped with hf-ralm, loadable offline by bare name or by path.

Example:
    >>> import evaluate, hf_ralm.metrics
    >>> metric = evaluate.load(hf_ralm.metrics.metric_path("ralm_perplexity"))  # doctest: +SKIP
"""

import os

METRICS = ("ralm_perplexity", "ralm_exact_match")


def metric_path(name: str) -> str:
    """The folder of a shipped metric, for ``evaluate.load(path)``."""
    if name not in METRICS:
        raise ValueError(f"Unknown hf-ralm metric {name!r}; shipped metrics: {', '.join(METRICS)}.")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
