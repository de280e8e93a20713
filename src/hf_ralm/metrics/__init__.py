"""``evaluate`` metrics shipped with hf-ralm, loadable offline by bare name or by path.

``evaluate.load(name)`` looks a bare name up on the Hub and, when the Hub is out of reach, in its module cache
(``$HF_MODULES_CACHE``, by default ``~/.cache/huggingface/modules``). ``import hf_ralm`` calls
[`register_metrics`][hf_ralm.metrics.register_metrics], which keeps a one-line shim of each metric there (importing it
from the installed package), so that after hf-ralm has been imported once in an environment
``evaluate.load("ralm_perplexity")`` works offline, in any later process too. Nothing runs at interpreter start-up.

Examples:
    >>> import evaluate, hf_ralm
    >>> metric = evaluate.load("ralm_perplexity")                               # doctest: +SKIP
    >>> # by path, no cache involved:
    >>> metric = evaluate.load(hf_ralm.metrics.metric_path("ralm_perplexity"))  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os

METRICS = {"ralm_perplexity": "RalmPerplexity", "ralm_exact_match": "RalmExactMatch"}
CITATION = "Ram et al., In-Context Retrieval-Augmented Language Models, TACL 2023."


def metric_info(description: str, inputs_description: str, features):
    """The ``evaluate.MetricInfo`` of a shipped metric, with the paper's citation.

    Args:
        description: what it measures.
        inputs_description: its arguments.
        features: its input features.

    Returns:
        The ``evaluate.MetricInfo``.
    """
    import evaluate

    return evaluate.MetricInfo(module_type="metric", description=description, citation=CITATION,
                               inputs_description=inputs_description, features=features)


class CheckedInputs:
    """What a shipped metric's ``compute`` does first: its inputs checked by its ``check_inputs(predictions,
    references)`` (hf-ralm's one-line refusals naming the argument: ``None``, a single text, an item that is no
    text), before ``evaluate``'s own check, whose message names the features, or its "call add at least once" for
    ``predictions=None``. Inputs added before with ``add``/``add_batch`` pass as ``evaluate`` takes them."""

    def check_inputs(self, predictions, references) -> None:
        raise NotImplementedError

    def compute(self, *, predictions=None, references=None, **kwargs):
        """``evaluate``'s ``compute``, the inputs checked first (``evaluate`` appends the metric's arguments to this
        text, as it does to its own ``compute``'s).

        Args:
            predictions: the predictions (``None``: those added before).
            references: the references (``None``: those added before).
            **kwargs: the metric's own arguments.

        Returns:
            The metric's figures.
        """
        if predictions is not None or references is not None or getattr(self, "writer", None) is None:
            self.check_inputs(predictions, references)
        return super().compute(predictions=predictions, references=references, **kwargs)


def metric_path(name: str) -> str:
    """The folder of a shipped metric, for ``evaluate.load(path)``.

    Args:
        name: ``ralm_perplexity`` or ``ralm_exact_match``.

    Returns:
        The folder.

    Raises:
        ValueError: no metric of that name is shipped.
    """
    if name not in METRICS:
        raise ValueError(f"Unknown hf-ralm metric {name!r}; shipped metrics: {', '.join(METRICS)}.")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def modules_cache() -> str:
    """``evaluate``'s module cache: ``$HF_MODULES_CACHE``, else ``$HF_HOME/modules``, else
    ``$XDG_CACHE_HOME/huggingface/modules`` (``~/.cache`` when unset), as ``evaluate`` resolves it."""
    if os.environ.get("HF_MODULES_CACHE"):
        return os.path.expanduser(os.environ["HF_MODULES_CACHE"])
    cache_home = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.join(os.path.expanduser(os.environ.get("HF_HOME", os.path.join(cache_home, "huggingface"))),
                        "modules")


def register_metrics() -> list[str]:
    """Write the shim of every shipped metric into ``evaluate``'s module cache where it is missing (one ``stat`` per
    metric when present; written atomically), so that ``evaluate.load("ralm_perplexity")`` resolves offline.

    Returns:
        The paths written.
    """
    root = os.path.join(modules_cache(), "evaluate_modules", "metrics")
    written = []
    for name, class_name in METRICS.items():
        code = f"from hf_ralm.metrics.{name}.{name} import {class_name}  # noqa: F401 (shim written by hf-ralm)\n"
        folder = os.path.join(root, f"evaluate-metric--{name}", hashlib.sha256(code.encode()).hexdigest())
        target = os.path.join(folder, f"{name}.py")
        if os.path.exists(target):
            continue
        os.makedirs(folder, exist_ok=True)
        for package in (os.path.dirname(root), root, os.path.dirname(folder), folder):  # evaluate imports these
            open(os.path.join(package, "__init__.py"), "a").close()
        tmp = f"{target}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(code)
        os.replace(tmp, target)
        written.append(target)
    return written
