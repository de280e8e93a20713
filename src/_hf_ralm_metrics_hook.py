"""Lets ``evaluate.load("ralm_perplexity")`` (and ``"ralm_exact_match"``) resolve by bare name, offline.

``evaluate`` resolves a bare name on the Hub and, failing that, in its module cache. The ``hf_ralm_metrics.pth``
file that hf-ralm installs imports this module at interpreter start-up; it only checks (one ``stat`` per metric) that
the cache holds a one-line shim importing the metric from the installed package, and writes it when missing. It
imports nothing heavy and never raises.
"""

import hashlib
import os

_METRICS = {"ralm_perplexity": "RalmPerplexity", "ralm_exact_match": "RalmExactMatch"}


def _modules_cache() -> str:
    if os.environ.get("HF_MODULES_CACHE"):
        return os.path.expanduser(os.environ["HF_MODULES_CACHE"])
    cache_home = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.join(os.path.expanduser(os.environ.get("HF_HOME", os.path.join(cache_home, "huggingface"))),
                        "modules")


def install_metric_shims() -> None:
    root = os.path.join(_modules_cache(), "evaluate_modules", "metrics")
    for name, class_name in _METRICS.items():
        code = f"from hf_ralm.metrics.{name}.{name} import {class_name}  # noqa: F401 (shim written by hf-ralm)\n"
        folder = os.path.join(root, f"evaluate-metric--{name}", hashlib.sha256(code.encode()).hexdigest())
        target = os.path.join(folder, f"{name}.py")
        if os.path.exists(target):
            continue
        os.makedirs(folder, exist_ok=True)
        for package in (os.path.dirname(root), root, os.path.dirname(folder), folder):
            open(os.path.join(package, "__init__.py"), "a").close()
        tmp = f"{target}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(code)
        os.replace(tmp, target)


try:
    install_metric_shims()
except Exception:  # start-up must never fail because of a cache folder
    pass
