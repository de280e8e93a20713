"""hf-ralm inside other tools' front doors: ``hf_ralm.integrations.lm_eval`` is lm-evaluation-harness's ``ralm``
model (``pip install "hf-ralm[lm-eval]"``), ``hf_ralm.integrations.lm_eval_cli`` its command line. Each module
imports its tool, so each name below is imported from its module when first used: ``import hf_ralm.integrations``
imports no tool.

Examples:
    ```python
    from hf_ralm.integrations import RalmLM

    lm = RalmLM("HuggingFaceTB/SmolLM2-135M", retriever="bm25", index_dir="wiki-bm25", max_length=256)
    ```
"""

from ..utils.lazy import lazy_exports

LAZY_EXPORTS = {"lm_eval": ("RalmLM",)}
"""The public names, by the module that defines them."""

__getattr__, __dir__ = lazy_exports(__name__, LAZY_EXPORTS)
__all__ = ["RalmLM"]
