"""The RALM's settings, below everything that runs a model: the settings
([`configuration_ralm`][hf_ralm.config.configuration_ralm]: [`RalmConfig`][hf_ralm.RalmConfig] and its one
``validate()``; [`settings`][hf_ralm.config.settings]: their defaults, types, flags and checks of single values in plain
Python), the default query length each retriever declares ([`query_lengths`][hf_ralm.config.query_lengths]), the
passage template ([`passage_template`][hf_ralm.config.passage_template]), the checks of the window settings
([`window_checks`][hf_ralm.config.window_checks]) and what the settings know of the selection strategies they name
([`strategy_settings`][hf_ralm.config.strategy_settings]: the stages, the names registered, the settings each owns and
their checks).

The strategies themselves live with what runs them, in [`hf_ralm.selection.strategies`][hf_ralm.selection.strategies];
registering one declares it here, so the settings name and check it without importing it.

Examples:
    ```python
    from hf_ralm.config.configuration_ralm import RalmConfig
    from hf_ralm.config.strategy_settings import RERANK, strategy_names

    RalmConfig(rerank="lm").rerank in strategy_names(RERANK)
    ```
"""

from ..utils.lazy import lazy_exports

LAZY_EXPORTS = {
    "strategy_settings": ("GATE", "RERANK", "StrategySettings", "check_strategy", "gates", "reranks",
                          "strategies_help", "strategy_names"),
}
"""The public names, by the module that defines them (imported when first used: the settings import transformers)."""

__getattr__, __dir__ = lazy_exports(__name__, LAZY_EXPORTS)
__all__ = [name for names in LAZY_EXPORTS.values() for name in names]
