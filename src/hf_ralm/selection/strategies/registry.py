"""The registry of passage-selection strategies (peft's register line, bm25s's table of scorers).

Every way of choosing what a window (evaluation) or a generation stride puts in context is one object, in one file of
[`hf_ralm.selection.strategies`][hf_ralm.selection.strategies], registered with
[`register_strategy`][hf_ralm.selection.strategies.registry.register_strategy]. It declares its ``name``, the stage it
belongs to, the settings it owns ([`Strategy.fields`][hf_ralm.selection.strategies.registry.Strategy.fields]) and their
checks ([`Strategy.validate`][hf_ralm.selection.strategies.registry.Strategy.validate]), what it needs
([`Strategy.needs`][hf_ralm.selection.strategies.registry.Strategy.needs]), its cost per window in reader inputs
([`Strategy.reader_inputs`][hf_ralm.selection.strategies.registry.Strategy.reader_inputs]), whether it looks at the
future ([`Strategy.looks_at_future`][hf_ralm.selection.strategies.registry.Strategy.looks_at_future]), the rows it
offers ``--compare`` ([`Strategy.comparisons`][hf_ralm.selection.strategies.registry.Strategy.comparisons]) and its
choice. Two stages, each named by the [`RalmConfig`][hf_ralm.RalmConfig] setting that picks its strategy:

* [`RERANK`][hf_ralm.config.strategy_settings.RERANK] (``rerank``,
  [`RerankStrategy`][hf_ralm.selection.strategies.registry.RerankStrategy]): which of a window's retrieved candidates
  goes in context first ([`RerankStrategy.choose`][hf_ralm.selection.strategies.registry.RerankStrategy.choose]);
* [`GATE`][hf_ralm.config.strategy_settings.GATE] (``retrieval_gate``,
  [`GateStrategy`][hf_ralm.selection.strategies.registry.GateStrategy]): whether a window keeps a passage at all
  ([`GateStrategy.opens`][hf_ralm.selection.strategies.registry.GateStrategy.opens]), deciding before reranking (on
  retrieval's passages) or after it (on the chosen one).

A strategy chooses from numbers alone ([`Candidates`][hf_ralm.selection.strategies.registry.Candidates]): the selection
policy ([`PassagePolicy`][hf_ralm.selection.policy.PassagePolicy]) computes what it needs, for evaluation and generation
alike, and ``--compare`` reads the same numbers from one scored pass
([`choose_from_scores`][hf_ralm.selection.candidates.choose_from_scores]). So whatever reads a setting's strategies
([`RalmConfig.validate`][hf_ralm.RalmConfig.validate], the policy, ``--compare``, the
run-cost estimate, generation, the command line's choices and help, the benchmarks) reads this table (the settings
through [`hf_ralm.config.strategy_settings`][hf_ralm.config.strategy_settings], where
[`register_strategy`][hf_ralm.selection.strategies.registry.register_strategy] declares each strategy), and a strategy
registered from outside the package is everywhere at once.

Examples:
    >>> strategy_names(RERANK), strategy_names(GATE)
    (('none', 'lm', 'predictive', 'oracle', 'random'), ('always', 'score', 'lm'))
    >>> get_strategy(RERANK, "oracle").looks_at_future, get_strategy(RERANK, "lm").needs == {RANKING_NLLS}
    (True, True)
    >>> get_strategy(GATE, "sometimes")
    Traceback (most recent call last):
    ...
    hf_ralm.errors.SettingError: retrieval_gate must be one of always, score, lm, got 'sometimes'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from ...config.strategy_settings import (
    GATE,
    RERANK,
    declare_strategy,
    declared_strategies,
    declared_strategy,
    either,
    strategy_names,
)
from ...core.passages import Passage
from ...errors import SettingError, setting

if TYPE_CHECKING:
    from ...config.configuration_ralm import RalmConfig

RETRIEVAL_SCORES = "retrieval scores"
"""A need: the retriever's scores of the candidates (``Passage.score``, always at hand)."""

NORMALIZED_SCORES = "normalized scores"
"""A need: the top passage's score over its query's maximum attainable score (the retriever's ``max_scores``)."""

RANKING_NLLS = "ranking NLLs"
"""A need: per option, an LM's summed NLL of the ranking tokens (the last ``rerank_tokens`` tokens before the window's
target): the reader's, or the ``reranker_model`` LM's."""

TARGET_NLLS = "target NLLs"
"""A need: per option, the reader's summed NLL of the window's own target tokens: it looks at the future."""

CROSS_ENCODER = "cross-encoder"
"""A need: the choice of the trained cross-encoder ``reranker_model`` (the predictive reranker)."""

NEEDS = frozenset({RETRIEVAL_SCORES, NORMALIZED_SCORES, RANKING_NLLS, TARGET_NLLS, CROSS_ENCODER})

SCORED_PASS = frozenset({RETRIEVAL_SCORES, NORMALIZED_SCORES, RANKING_NLLS, TARGET_NLLS})
"""What one scored pass gives ([`score_candidates`][hf_ralm.selection.candidates.score_candidates]: the reader on every
candidate and on no passage, the retriever at hand): a strategy that needs no more has a ``--compare`` row."""

BEFORE, AFTER = "before reranking", "after reranking"
"""Where a gate decides: on retrieval's passages before reranking, or on the chosen passage after it."""


@dataclass(frozen=True)
class Candidates:
    """What a strategy chooses from for one window (or generation stride), with what the strategy
    [`needs`][hf_ralm.selection.strategies.registry.Strategy.needs] (``None`` when not needed, or nothing could be
    ranked).

    Attributes:
        passages: in retrieval order: for reranking, the first ``rerank_candidates`` retrieved (after a gate that
            decides before); for a gate that decides after reranking, the chosen passage.
        query: the window's query.
        key: what a random choice is keyed on: the window's index, or a generation row's prompt and stride.
        options: the options ranked: the passages, then ``None`` for no passage with ``rerank_allow_no_passage``.
        ranking_nlls: one per option: the NLL of the ranking tokens.
        target_nlls: one per option: the NLL of the window's target tokens.
        predicted: the cross-encoder's choice (-1 for none).
        normalized_score: the top passage's score over the query's maximum attainable score.

    Examples:
        >>> rome = Passage("1", "Rome", "rome was the city", 7.5)
        >>> Candidates([rome], "the emperor of", 3, options=[rome, None], ranking_nlls=[10.0, 12.5]).no_passage
        1
    """

    passages: Sequence[Passage]
    query: str | None
    key: int
    options: Sequence[Passage | None] = field(default_factory=list)
    ranking_nlls: Sequence[float] | None = None
    target_nlls: Sequence[float] | None = None
    predicted: int | None = None
    normalized_score: float | None = None

    @property
    def no_passage(self) -> int:
        """The index of the no-passage option (after the passages)."""
        return len(self.passages)


@dataclass(frozen=True)
class ComparisonRow:
    """A row ``--compare`` offers.

    Attributes:
        name: the row's name (what ``--compare`` lists).
        what: what it chooses, in words.
        settings: the settings of the separate ``eval-lm`` run whose figures it gives, from the run's config
            (``None``: no passage in any window, the baseline). Settings not given are the paper's (no reranking, no
            gate) over the pass's candidates.
    """

    name: str
    what: str
    settings: Callable[[RalmConfig], dict] | None


NO_RETRIEVAL = ComparisonRow("none", "no passage", None)
"""The baseline row of every comparison: no retrieval."""


class Strategy:
    """A passage-selection strategy: one object, one file, registered with
    [`register_strategy`][hf_ralm.selection.strategies.registry.register_strategy]. Subclass
    [`RerankStrategy`][hf_ralm.selection.strategies.registry.RerankStrategy] or
    [`GateStrategy`][hf_ralm.selection.strategies.registry.GateStrategy], set the class attributes and override what
    differs.

    Attributes:
        stage: [`RERANK`][hf_ralm.config.strategy_settings.RERANK] or
            [`GATE`][hf_ralm.config.strategy_settings.GATE], the setting whose value names it.
        name: that value (``"lm"``, ``"score"``, ...).
        help: one line for ``--help`` (settings marked with [`setting`][hf_ralm.errors.setting], named by their flags).
        fields: the settings it reads; those of
            [`EXCLUSIVE_FIELDS`][hf_ralm.config.strategy_settings.EXCLUSIVE_FIELDS] are refused under a strategy not
            owning them.
        needs: what the policy computes for it ([`NEEDS`][hf_ralm.selection.strategies.registry.NEEDS]: at most one of
            [`RANKING_NLLS`][hf_ralm.selection.strategies.registry.RANKING_NLLS] and
            [`TARGET_NLLS`][hf_ralm.selection.strategies.registry.TARGET_NLLS]).
        chooses: whether it changes what retrieval's order puts in context (all but the paper's ``"none"`` and
            ``"always"``).
    """

    stage: str
    name: str
    help: str = ""
    fields: tuple[str, ...] = ()
    needs: frozenset[str] = frozenset()
    chooses: bool = True

    @property
    def looks_at_future(self) -> bool:
        """Whether it chooses by the tokens being scored (the oracle: an upper bound, not a method). Such a strategy
        is refused in generation and lm-eval, and every evaluation under it says so (``oracle_looks_at_future``)."""
        return TARGET_NLLS in self.needs

    def validate(self, config: RalmConfig) -> None:
        """Check that ``config``'s settings fit this strategy, after the generic checks (the settings' own ranges,
        [`EXCLUSIVE_FIELDS`][hf_ralm.config.strategy_settings.EXCLUSIVE_FIELDS]).

        Args:
            config: the settings.

        Raises:
            SettingError: they do not (the message names the setting).
        """

    def reader_inputs(self, config: RalmConfig) -> int:
        """The reader inputs a window with retrieval runs to choose under ``config``.

        Args:
            config: the settings.

        Returns:
            The count (0: the reader does not run to choose; the chosen passage's own input is not counted).
        """
        return 0

    def comparisons(self) -> list[ComparisonRow]:
        """The rows it offers ``--compare``.

        Returns:
            By default one, under its name, when one scored pass gives what it needs
                ([`SCORED_PASS`][hf_ralm.selection.strategies.registry.SCORED_PASS]) and it chooses; else none.
        """
        if not self.chooses or not self.needs <= SCORED_PASS:
            return []
        return [ComparisonRow(self.name, self.help, lambda config: {self.stage: self.name})]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.stage}={self.name!r})"


class RerankStrategy(Strategy):
    """A reranking strategy (``rerank=name``): which of a window's candidates goes in context first.

    Subclasses set the [`Strategy`][hf_ralm.selection.strategies.registry.Strategy] attributes and define
    [`choose`][hf_ralm.selection.strategies.registry.RerankStrategy.choose] (an example:
    [`hf_ralm.selection.strategies`][hf_ralm.selection.strategies]'s docstring).
    """

    stage = RERANK

    def choose(self, candidates: Candidates, config: RalmConfig) -> int:
        """Choose a window's passage.

        Args:
            candidates: the window's candidates (``candidates.passages`` is never empty) and what the strategy
                needs.
            config: the settings.

        Returns:
            The index of the chosen passage among ``candidates.passages``, or
                [`NO_PASSAGE`][hf_ralm.core.passages.NO_PASSAGE] for none.
        """
        raise NotImplementedError


class GateStrategy(Strategy):
    """A retrieval gate (``retrieval_gate=name``): whether a window keeps a passage.

    Attributes:
        position: [`BEFORE`][hf_ralm.selection.strategies.registry.BEFORE] (it decides on retrieval's passages, before
            reranking), [`AFTER`][hf_ralm.selection.strategies.registry.AFTER] (on the chosen passage, ranked against no
            passage under [`ranking_settings`][hf_ralm.selection.strategies.registry.GateStrategy.ranking_settings]) or
            ``None`` (it never closes).
        one_passage: it weighs one passage against none, so it is not combined with several passages in context or
            an ensemble.
    """

    stage = GATE
    position: str | None = None
    one_passage: bool = False

    def opens(self, candidates: Candidates, config: RalmConfig) -> bool:
        """Whether the window keeps its passages.

        Args:
            candidates: the window's passages and what the gate needs.
            config: the settings (for a gate after reranking, its ranking config).

        Returns:
            True to keep them.
        """
        return True

    def score(self, candidates: Candidates) -> float | None:
        """What the gate decided on, recorded per window (``gate_score``).

        Args:
            candidates: the window's passages and what the gate needs.

        Returns:
            The number, or ``None`` where it decided on nothing.
        """
        return None

    def ranking_settings(self, config: RalmConfig) -> dict:
        """For a gate after reranking: the settings it ranks the chosen passage against no passage under.

        Args:
            config: the run's settings.

        Returns:
            The settings that replace ``config``'s for the gate's ranking (none for a gate before reranking).
        """
        return {}


def register_strategy(strategy: Strategy) -> Strategy:
    """Add ``strategy`` to the table: its name becomes a value of its stage's setting (``RalmConfig(rerank=name)``,
    ``hf-ralm ... --rerank name``), in evaluation, generation, the run-cost estimate and, when one scored pass gives
    what it needs, ``--compare``.

    Args:
        strategy: a [`RerankStrategy`][hf_ralm.selection.strategies.registry.RerankStrategy] or a
            [`GateStrategy`][hf_ralm.selection.strategies.registry.GateStrategy].

    Returns:
        ``strategy``.

    Raises:
        TypeError: it is neither.
        ValueError: it has no name, its name is registered already in its stage, its ``needs`` are unknown (or both
            NLLs), or a ``--compare`` row it offers is taken.

    Examples:
        ```python
        register_strategy(ScoreMargin())   # a RerankStrategy named "bm25-margin"
        RalmConfig(rerank="bm25-margin")
        ```
    """
    if strategy.stage not in (RERANK, GATE) or not isinstance(strategy, (RerankStrategy, GateStrategy)):
        raise TypeError(f"A strategy is a RerankStrategy or a GateStrategy, got {strategy!r}.")
    if not isinstance(getattr(strategy, "name", None), str) or not strategy.name:
        raise ValueError(f"{type(strategy).__name__} needs a name: the value of {strategy.stage} that picks it.")
    if strategy.name in strategy_names(strategy.stage):
        raise ValueError(f"{strategy.stage}={strategy.name!r} is registered already "
                         f"({declared_strategy(strategy.stage, strategy.name)!r}): give the strategy another name.")
    unknown = set(strategy.needs) - NEEDS
    if unknown or {RANKING_NLLS, TARGET_NLLS} <= set(strategy.needs):
        raise ValueError(f"{strategy!r} needs {sorted(strategy.needs)}: each must be one of {sorted(NEEDS)}, and at "
                         f"most one of {RANKING_NLLS!r} and {TARGET_NLLS!r} (what an LM ranks on).")
    taken = set(comparison_rows()) & {row.name for row in strategy.comparisons()}
    if taken:
        raise ValueError(f"{strategy!r} offers --compare rows {sorted(taken)}, which other strategies offer already.")
    declare_strategy(strategy)
    return strategy


def get_strategy(stage: str, name: str) -> Strategy:
    """The strategy a setting's value names, with how it chooses: the registered object that
    [`declared_strategy`][hf_ralm.config.strategy_settings.declared_strategy] finds (a ``SettingError`` listing the
    registered names when none of ``stage`` has that name).

    Examples:
        >>> get_strategy(RERANK, "predictive").needs == {CROSS_ENCODER}
        True
    """
    return declared_strategy(stage, name)


def future_looking(rerank: str | None, retrieval_gate: str | None = None) -> list[Strategy]:
    """The strategies among these that look at the future
    ([`Strategy.looks_at_future`][hf_ralm.selection.strategies.registry.Strategy.looks_at_future]).

    Args:
        rerank: a reranking strategy's name.
        retrieval_gate: a gate's name.

    Returns:
        Those of them registered here that look at the future.

    Examples:
        >>> future_looking("oracle", "always"), future_looking("lm", "lm")
        ([OracleRerankStrategy(rerank='oracle')], [])
    """
    declared = {(strategy.stage, strategy.name): strategy for strategy in declared_strategies()}
    chosen = [declared.get((RERANK, rerank)), declared.get((GATE, retrieval_gate))]
    return [strategy for strategy in chosen if strategy is not None and strategy.looks_at_future]


def ranks_target(config: RalmConfig) -> bool:
    """Whether an LM ranking under ``config`` ranks on the window's target tokens (the strategy needs
    [`TARGET_NLLS`][hf_ralm.selection.strategies.registry.TARGET_NLLS]) rather than on the ranking tokens before it.

    Args:
        config: the settings.

    Returns:
        True for a strategy that ranks on the target (the oracle).
    """
    return TARGET_NLLS in get_strategy(RERANK, config.rerank).needs


def check_generation(config: RalmConfig) -> None:
    """Check that generation can choose as ``config`` asks. (An ensemble with reranking is refused by the config
    itself, [`check_ensemble`][hf_ralm.config.configuration_ralm.check_ensemble].)

    Args:
        config: the settings.

    Raises:
        SettingError: a strategy looks at the future: it ranks on tokens not generated yet.

    Examples:
        >>> from hf_ralm.config.configuration_ralm import RalmConfig
        >>> check_generation(RalmConfig(rerank="oracle"))   # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: rerank='oracle' ranks the candidates on the very tokens they are to predict, ...
    """
    for strategy in future_looking(config.rerank, config.retrieval_gate):
        others = [s.name for s in declared_strategies(strategy.stage) if s.chooses and not s.looks_at_future]
        raise SettingError(f"{setting(strategy.stage)}={strategy.name!r} ranks the candidates on the very tokens "
                           "they are to predict, which generation has not produced yet: generate with "
                           f"{setting(strategy.stage)}={either(others)} (a strategy that looks at the future is for "
                           "evaluation).")


def reader_inputs_per_window(config: RalmConfig) -> int:
    """How many reader inputs a window with retrieval costs under ``config``: the run-cost estimate multiplies it.

    Args:
        config: the settings.

    Returns:
        What its reranking runs to choose, else what its gate runs, else one per passage mixed (an ensemble) or one.

    Examples:
        >>> from hf_ralm.config.configuration_ralm import RalmConfig
        >>> [reader_inputs_per_window(RalmConfig(**settings)) for settings in
        ...  ({}, {"rerank": "lm", "rerank_candidates": 8}, {"retrieval_gate": "lm"}, {"ensemble_size": 4})]
        [1, 8, 2, 4]
    """
    for stage in (RERANK, GATE):
        inputs = get_strategy(stage, getattr(config, stage)).reader_inputs(config)
        if inputs:
            return inputs
    return max(1, config.ensemble_size)


def reader_ranks(config: RalmConfig) -> bool:
    """Whether choosing passages under ``config`` runs the reader (its own LM reranking, the oracle, the lm gate).
    Otherwise retrieval needs only the reader's tokenizer and maximum length.

    Args:
        config: the settings.

    Returns:
        True when the reader runs to choose.

    Examples:
        >>> from hf_ralm.config.configuration_ralm import RalmConfig
        >>> reader_ranks(RalmConfig(rerank="predictive", reranker_model="me/reranker")), reader_ranks(RalmConfig())
        (False, False)
        >>> reader_ranks(RalmConfig(rerank="lm")), reader_ranks(RalmConfig(retrieval_gate="lm"))
        (True, True)
    """
    return any(get_strategy(stage, getattr(config, stage)).reader_inputs(config) for stage in (RERANK, GATE))


def comparison_rows() -> dict[str, ComparisonRow]:
    """Every row ``--compare`` offers.

    Returns:
        The rows by name: no retrieval, then the registered strategies' rows in the order they were registered.
    """
    rows = [NO_RETRIEVAL] + [row for strategy in declared_strategies() for row in strategy.comparisons()]
    return {row.name: row for row in rows}
