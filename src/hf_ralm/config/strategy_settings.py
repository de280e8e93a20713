"""The selection strategies as the settings know them, in plain Python (no strategy is imported): the two stages
and the setting that names each one's strategy ([`RERANK`][hf_ralm.config.strategy_settings.RERANK],
[`GATE`][hf_ralm.config.strategy_settings.GATE]), the names registered, the settings each strategy owns and their
checks ([`check_strategy`][hf_ralm.config.strategy_settings.check_strategy], which
[`RalmConfig.validate`][hf_ralm.RalmConfig.validate] runs), and whether a strategy chooses at all
([`reranks`][hf_ralm.config.strategy_settings.reranks], [`gates`][hf_ralm.config.strategy_settings.gates]).

The strategies themselves, and how they choose, live with what runs them
([`hf_ralm.selection.strategies`][hf_ralm.selection.strategies]); the settings sit below them and import none of it,
so [`register_strategy`][hf_ralm.selection.strategies.registry.register_strategy] declares each strategy here
([`declare_strategy`][hf_ralm.config.strategy_settings.declare_strategy]): hf-ralm's own when ``hf_ralm`` is
imported, one from outside when it is registered. A declared strategy is the registered object itself, of which the
settings read only what [`StrategySettings`][hf_ralm.config.strategy_settings.StrategySettings] lists.

Examples:
    >>> strategy_names(RERANK), strategy_names(GATE)
    (('none', 'lm', 'predictive', 'oracle', 'random'), ('always', 'score', 'lm'))
    >>> declared_strategy(GATE, "sometimes")
    Traceback (most recent call last):
    ...
    hf_ralm.errors.SettingError: retrieval_gate must be one of always, score, lm, got 'sometimes'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

from ..errors import SettingError, setting

if TYPE_CHECKING:  # the config asks this table, so the table never imports the config
    from .configuration_ralm import RalmConfig

RERANK = "rerank"
"""The reranking stage, named by the setting that picks its strategy."""

GATE = "retrieval_gate"
"""The retrieval-gate stage, named by the setting that picks its strategy."""

EXCLUSIVE_FIELDS = {"reranker_model": (RERANK, None, "the ranking model"),
                    "rerank_allow_no_passage": (RERANK, False, "the no-passage candidate"),
                    "gate_threshold": (GATE, None, "the threshold")}
"""Settings that only the strategies owning them take (in their
[`fields`][hf_ralm.selection.strategies.registry.Strategy.fields]): ``field: (stage, value when not given, what it
is)``. Given under a strategy that does not own it, a setting is refused rather than ignored."""


class StrategySettings(Protocol):
    """What the settings read of a registered strategy (a
    [`Strategy`][hf_ralm.selection.strategies.registry.Strategy] is one): the rest, how it chooses, is the selection
    policy's.

    Attributes:
        stage: [`RERANK`][hf_ralm.config.strategy_settings.RERANK] or
            [`GATE`][hf_ralm.config.strategy_settings.GATE], the setting whose value names it.
        name: that value.
        help: one line for ``--help``.
        fields: the settings it reads; those of
            [`EXCLUSIVE_FIELDS`][hf_ralm.config.strategy_settings.EXCLUSIVE_FIELDS] are refused under a strategy not
            owning them.
        chooses: whether it changes what retrieval's order puts in context. A gate also says whether it weighs one
            passage against none (``one_passage``).
    """

    stage: str
    name: str
    help: str
    fields: tuple[str, ...]
    chooses: bool

    def validate(self, config: RalmConfig) -> None:
        """Check that ``config``'s settings fit this strategy (raising a ``SettingError`` that names the setting)."""


_STRATEGIES: dict[tuple[str, str], StrategySettings] = {}
"""The registered strategies by ``(stage, name)``, in the order they were registered
([`declare_strategy`][hf_ralm.config.strategy_settings.declare_strategy])."""


def declare_strategy(strategy: StrategySettings) -> None:
    """Record ``strategy`` as a value of its stage's setting: what
    [`register_strategy`][hf_ralm.selection.strategies.registry.register_strategy] calls once it has checked it.

    Args:
        strategy: the registered strategy.
    """
    _STRATEGIES[strategy.stage, strategy.name] = strategy


def declared_strategies(stage: str | None = None) -> list[StrategySettings]:
    """The registered strategies of a stage.

    Args:
        stage: [`RERANK`][hf_ralm.config.strategy_settings.RERANK] or
            [`GATE`][hf_ralm.config.strategy_settings.GATE]; ``None``: both.

    Returns:
        Its strategies, in the order they were registered.
    """
    return [strategy for (of, _), strategy in _STRATEGIES.items() if stage is None or of == stage]


def strategy_names(stage: str) -> tuple[str, ...]:
    """The values a stage's setting takes (the command line's choices).

    Args:
        stage: [`RERANK`][hf_ralm.config.strategy_settings.RERANK] or
            [`GATE`][hf_ralm.config.strategy_settings.GATE].

    Returns:
        The registered strategies' names, in the order they were registered.

    Examples:
        >>> strategy_names(GATE)[0]
        'always'
    """
    return tuple(strategy.name for strategy in declared_strategies(stage))


def declared_strategy(stage: str, name: str) -> StrategySettings:
    """The strategy a setting's value names.

    Args:
        stage: [`RERANK`][hf_ralm.config.strategy_settings.RERANK] or
            [`GATE`][hf_ralm.config.strategy_settings.GATE].
        name: the setting's value.

    Returns:
        The registered strategy.

    Raises:
        SettingError: no strategy of ``stage`` has that name (the message lists those registered).
    """
    strategy = _STRATEGIES.get((stage, name))
    if strategy is None:
        raise SettingError(f"{setting(stage)} must be one of {', '.join(strategy_names(stage))}, got {name!r}.")
    return strategy


def _chooses(stage: str, name: str | None) -> bool:
    if name is None:
        return False
    strategy = _STRATEGIES.get((stage, name))
    return strategy is None or strategy.chooses  # a strategy this process does not know (a file's) chose something


def reranks(name: str | None) -> bool:
    """Whether a reranking strategy chooses among the retrieved candidates.

    Args:
        name: its name; ``None`` is a file that records no reranking.

    Returns:
        True for every registered strategy but ``"none"``, and for a name not registered here (read from another
            process's file); False for ``None``.

    Examples:
        >>> reranks("lm"), reranks("none"), reranks(None)
        (True, False, False)
    """
    return _chooses(RERANK, name)


def gates(name: str | None) -> bool:
    """Whether a retrieval gate can close a window (see [`reranks`][hf_ralm.config.strategy_settings.reranks]).

    Args:
        name: its name (``None``: none recorded).

    Returns:
        True for every registered gate but ``"always"``, and for a name not registered here.
    """
    return _chooses(GATE, name)


def check_strategy(config: RalmConfig, stage: str) -> StrategySettings:
    """The strategy ``config`` picks for ``stage``, after the checks of its settings
    ([`RalmConfig.validate`][hf_ralm.RalmConfig.validate] runs this for both stages).

    Args:
        config: the settings.
        stage: [`RERANK`][hf_ralm.config.strategy_settings.RERANK] or
            [`GATE`][hf_ralm.config.strategy_settings.GATE].

    Returns:
        The strategy.

    Raises:
        SettingError: an unknown name, a setting of
            [`EXCLUSIVE_FIELDS`][hf_ralm.config.strategy_settings.EXCLUSIVE_FIELDS] it does not own, several
            passages under a gate that weighs one, or what its own
            [`validate`][hf_ralm.selection.strategies.registry.Strategy.validate] refuses.
    """
    strategy = declared_strategy(stage, getattr(config, stage))
    for name, (of, unset, what) in EXCLUSIVE_FIELDS.items():
        if of == stage and getattr(config, name) != unset and name not in strategy.fields:
            owners = either([s.name for s in declared_strategies(stage) if name in s.fields])
            raise SettingError(f"{setting(name)} is {what} of {setting(stage)}={owners}; "
                               f"{setting(stage)}={strategy.name!r} uses none: drop {setting(name)}.")
    if getattr(strategy, "one_passage", False) and config.num_passages > 1:
        raise SettingError(f"{setting(stage)}={strategy.name!r} weighs one passage against none; "
                           f"{setting('num_passages')}={config.num_passages} puts several in context: use "
                           f"{setting(GATE)}='score' with several passages, or {setting('num_passages')}=1.")
    strategy.validate(config)
    return strategy


def strategies_help(stage: str) -> str:
    """A stage's strategies for ``--help``.

    Args:
        stage: [`RERANK`][hf_ralm.config.strategy_settings.RERANK] or
            [`GATE`][hf_ralm.config.strategy_settings.GATE].

    Returns:
        ``name (help)`` of each, listed.

    Examples:
        >>> strategies_help(GATE).split(" (")[0]
        'always'
    """
    return either([f"{strategy.name} ({strategy.help})" for strategy in declared_strategies(stage)], quote=False)


def either(names: Sequence[str], quote: bool = True) -> str:
    """Names listed as a sentence lists them: ``'a', 'b' or 'c'``.

    Args:
        names: the names.
        quote: quote each (``repr``).

    Returns:
        The list (empty for no names).

    Examples:
        >>> either(["lm", "oracle", "predictive"]), either(["a"], quote=False)
        ("'lm', 'oracle' or 'predictive'", 'a')
    """
    shown = [repr(name) if quote else name for name in names]
    return " or ".join(filter(None, [", ".join(shown[:-1]), shown[-1]])) if shown else ""
