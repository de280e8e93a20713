"""The RALM's settings and the values and arithmetic they define, below everything that runs a model: the settings
([`configuration_ralm`][hf_ralm.config.configuration_ralm]: [`RalmConfig`][hf_ralm.RalmConfig] and its one
``validate()``), the default query length each retriever declares ([`query_lengths`][hf_ralm.config.query_lengths]), a
passage ([`passages`][hf_ralm.config.passages]), the window plan's arithmetic ([`windows`][hf_ralm.config.windows]), and
the selection strategies the settings name, one file each with their registry
([`strategies`][hf_ralm.config.strategies]) and the exact rules they share ([`rules`][hf_ralm.config.rules]).

The settings and the strategies they name live in one package because each asks the other: ``RalmConfig.validate``
asks the registry about ``rerank`` and ``retrieval_gate``, and a strategy reads its settings from a ``RalmConfig``.

Examples:
    ```python
    from hf_ralm.config.configuration_ralm import RalmConfig
    from hf_ralm.config.windows import plan_windows

    windows = plan_windows(1_000, max_length=512, stride=RalmConfig().retrieval_stride)
    ```
"""

from ..utils.lazy import lazy_exports

LAZY_EXPORTS = {
    "rules": ("rank_correlation",),
}
"""The public names, by the module that defines them (imported when first used: the settings import transformers)."""

__getattr__, __dir__ = lazy_exports(__name__, LAZY_EXPORTS)
__all__ = [name for names in LAZY_EXPORTS.values() for name in names]
