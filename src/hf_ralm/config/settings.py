"""The RALM settings in plain Python (neither torch nor transformers is imported): each setting's default and type
(:class:`RalmSettings`, which :class:`~hf_ralm.config.configuration_ralm.RalmConfig` takes its fields from), how a
front end offers it (:data:`SETTING_FLAGS`: flag, group, help) and its check of its own value (:data:`VALUE_CHECKS`).
What the command line needs to answer ``--help`` and refuse a wrong value (``--stride 0``) before it loads anything:
``RalmConfig`` adds the checks that relate settings to each other and the ``PreTrainedConfig`` around them.

Example:
    >>> RalmSettings().retrieval_stride, SETTING_FLAGS["retrieval_stride"].flag
    (4, '--stride')
    >>> check_setting_values({"retrieval_stride": 0})
    Traceback (most recent call last):
    ...
    hf_ralm.errors.SettingError: retrieval_stride must be at least 1, got 0.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

from ..errors import SettingError, setting
from .passage_template import PASSAGE_TEMPLATE, passage_text
from .strategy_settings import GATE, RERANK, declared_strategy
from ..utils.checks import check_count, is_finite_number


@dataclass(kw_only=True, eq=False, repr=False)
class RalmSettings:
    """Every RALM setting with its type and default (the paper's): the one place they are declared.
    :class:`~hf_ralm.config.configuration_ralm.RalmConfig` takes its fields from here (it says what each means, and
    checks them); the command line's flags take their defaults and types from here, without transformers.

    Example:
        >>> RalmSettings().max_doc_tokens, RalmSettings(rerank="lm").rerank
        (256, 'lm')
    """

    base_model_name_or_path: str | None = None
    retrieval_stride: int = 4
    query_length: int | None = None
    max_doc_tokens: int = 256
    max_length: int | None = None
    passage_template: str = PASSAGE_TEMPLATE
    bos_every_window: bool = False
    rerank: str = "none"
    rerank_candidates: int = 16
    rerank_tokens: int = 16
    reranker_model: str | None = None
    rerank_allow_no_passage: bool = False
    rerank_no_passage_margin: float = 0.0
    rerank_seed: int = 0
    retrieval_gate: str = "always"
    gate_threshold: float | None = None
    num_passages: int = 1
    max_context_doc_tokens: int | None = None
    ensemble_size: int = 1
    ensemble_temperature: float = 1.0


RALM_FIELDS = frozenset(field.name for field in fields(RalmSettings))
"""The settings :class:`~hf_ralm.config.configuration_ralm.RalmConfig` adds to ``PreTrainedConfig``
(``retrieval_stride``, ``query_length``, ...)."""

TYPED_FIELDS = {"base_model_name_or_path": (str, type(None)), "passage_template": (str,), "bos_every_window": (bool,),
                "reranker_model": (str, type(None)), "rerank_allow_no_passage": (bool,)}
"""The settings that are no token counts, and the types they take (checked by :data:`VALUE_CHECKS`)."""

TEMPLATE_FIELDS = ("title", "text")
"""The fields a ``passage_template`` may use: :func:`~hf_ralm.config.passage_template.passage_text` fills them with
``str.format``."""


def check_passage_template(template: str) -> None:
    """Raise a :class:`~hf_ralm.errors.SettingError` unless ``template`` is a format string whose fields are only
    ``{title}`` and ``{text}`` (with a conversion or format spec that a string takes): what
    :func:`~hf_ralm.config.passage_template.passage_text` fills in for every passage, so a wrong template is refused
    when the config is made or read (a saved ``config.json``), not at the first passage.

    Example:
        >>> check_passage_template("Title: {title}\\n{text}")
        >>> check_passage_template("{nope}: {text}")
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: passage_template '{nope}: {text}' uses the field {nope}: a passage template may \
use only {title} and {text}, e.g. '{title}\\n{text}'.
    """
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
        unknown = next((name for name in names if name not in TEMPLATE_FIELDS), None)
        problem = f"uses the field {{{unknown}}}" if unknown is not None else None
        if problem is None:
            passage_text("Title", "Text", template)  # a format spec a string cannot take ({title:d})
    except ValueError as error:  # unbalanced braces, a bad format spec
        problem = f"is no format string that passage_text can fill ({error})"
    if problem is not None:
        raise SettingError(f"{setting('passage_template')} {template!r} {problem}: a passage template may use only "
                           f"{{title}} and {{text}}, e.g. {PASSAGE_TEMPLATE!r}.")


def _check_type(name: str, kinds: tuple[type, ...]) -> Callable[[Any], None]:
    """The check that a setting ``name`` is of one of ``kinds`` (:data:`TYPED_FIELDS`)."""
    def check(value: Any) -> None:
        if not isinstance(value, kinds):
            expected = " or ".join("None" if kind is type(None) else kind.__name__ for kind in kinds)
            raise ValueError(f"{name} must be {expected}, got {value!r}.")

    return check


def _count(name: str, minimum: int = 1, optional: bool = False) -> Callable[[Any], None]:
    """The check that a setting ``name`` is a count of at least ``minimum`` (or ``None`` when ``optional``)."""
    return lambda value: None if optional and value is None else check_count(name, value, minimum=minimum)


def _check_template(value: Any) -> None:
    _check_type("passage_template", TYPED_FIELDS["passage_template"])(value)
    check_passage_template(value)


def _check_margin(value: Any) -> None:
    if not is_finite_number(value):
        raise SettingError(f"{setting('rerank_no_passage_margin')} must be a finite number of nats, got {value!r}.")


def _check_temperature(value: Any) -> None:
    if not is_finite_number(value) or not value > 0:
        raise SettingError(f"{setting('ensemble_temperature')} must be a positive number, and finite (an infinite one "
                           f"weighs every passage alike), got {value!r}.")


VALUE_CHECKS: dict[str, Callable[[Any], None]] = {
    **{name: _check_type(name, kinds) for name, kinds in TYPED_FIELDS.items() if name != "passage_template"},
    "passage_template": _check_template,
    "retrieval_stride": _count("retrieval_stride"),
    "max_doc_tokens": _count("max_doc_tokens"),
    "query_length": _count("query_length", optional=True),
    "max_length": _count("max_length", optional=True),
    "rerank": lambda value: declared_strategy(RERANK, value),  # an unknown strategy before its settings
    "rerank_candidates": _count("rerank_candidates"),
    "rerank_tokens": _count("rerank_tokens"),
    "rerank_seed": _count("rerank_seed", minimum=0),
    "rerank_no_passage_margin": _check_margin,
    "num_passages": _count("num_passages"),
    "max_context_doc_tokens": _count("max_context_doc_tokens", optional=True),
    "ensemble_size": _count("ensemble_size"),
    "ensemble_temperature": _check_temperature,
}
"""Each setting's check of its own value, whatever the others are (a count at least 1, a type, a known strategy):
what :meth:`~hf_ralm.config.configuration_ralm.RalmConfig.validate` checks first, in this order, before the checks
that relate settings to each other (the window, a strategy's own settings, an ensemble's companions)."""


def check_setting_values(values: Mapping[str, Any]) -> None:
    """Check each of ``values`` (setting → value) on its own (:data:`VALUE_CHECKS`; a setting without such a check
    passes): what a front end can refuse before it knows the other settings, e.g. the command line before it looks up
    whether ``--model`` is a saved RALM whose settings the flags not given take.

    Example:
        >>> check_setting_values({"retrieval_stride": 8, "max_length": None})
        >>> check_setting_values({"retrieval_stride": 0})
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: retrieval_stride must be at least 1, got 0.
    """
    for name, check in VALUE_CHECKS.items():
        if name in values:
            check(values[name])


@dataclass(frozen=True)
class SettingFlag:
    """How a front end offers one RALM setting: its command-line ``flag``, the ``group`` it is listed under and its
    ``help`` (other settings named with :func:`~hf_ralm.errors.setting`, so that each front end names them its own
    way; ``%(default)s``: the setting's default, :class:`RalmSettings`'). The settings ``rerank`` and
    ``retrieval_gate`` pick a strategy of ``stage``: their choices are the registered strategies and ``{strategies}``
    in ``help`` lists them, both read when a parser is built (a plugin may register one later); ``{query_lengths}``
    lists the registered retrievers' default query lengths, likewise
    (:func:`~hf_ralm.config.query_lengths.query_lengths_help`).

    Example:
        >>> SETTING_FLAGS["retrieval_stride"].flag, SETTING_FLAGS["retrieval_stride"].group
        ('--stride', 'RALM settings')
    """

    flag: str
    group: str
    help: str
    stage: str | None = None


SETTING_FLAGS: dict[str, SettingFlag] = {
    "retrieval_stride": SettingFlag("--stride", "RALM settings",
                                    "retrieval stride s: retrieve every s tokens (default %(default)s)"),
    "query_length": SettingFlag("--query-length", "RALM settings",
                                "query length ℓ in tokens (default: the retriever's own: {query_lengths}; 32 "
                                "without retrieval)"),
    "max_length": SettingFlag("--max-length", "RALM settings", "window length L (default: the model's maximum)"),
    "max_doc_tokens": SettingFlag("--max-doc-tokens", "passages in context",
                                  "passage length cap in tokens (default %(default)s)"),
    "bos_every_window": SettingFlag("--bos-every-window", "passages in context",
                                    "put BOS at the start of every window (fair baseline for BOS-sensitive models)"),
    "rerank": SettingFlag("--rerank", "reranking", f"how each window's passage is chosen among "
                                                   f"{setting('rerank_candidates')} retrieved ones: {{strategies}}",
                          stage=RERANK),
    "rerank_candidates": SettingFlag("--rerank-candidates", "reranking",
                                     "k: retrieved passages to choose among (default %(default)s)"),
    "rerank_tokens": SettingFlag("--rerank-tokens", "reranking",
                                 f"s': prefix tokens {setting('rerank')} lm ranks on (default %(default)s)"),
    "reranker_model": SettingFlag("--reranker-model", "reranking",
                                  f"the LM that ranks for {setting('rerank')} lm (default: the model itself), or the "
                                  f"trained reranker of {setting('rerank')} predictive (folder or Hub id)"),
    "rerank_allow_no_passage": SettingFlag("--rerank-allow-no-passage", "reranking",
                                           f"with {setting('rerank')} lm/oracle/predictive, no passage is one more "
                                           "candidate"),
    "rerank_no_passage_margin": SettingFlag("--rerank-no-passage-margin", "reranking",
                                            f"with {setting('rerank_allow_no_passage')}, the nats of ranking NLL a "
                                            "passage must save over no passage to be chosen (default %(default)s)"),
    "rerank_seed": SettingFlag("--rerank-seed", "reranking",
                               f"seed of {setting('rerank')} random (default %(default)s)"),
    "retrieval_gate": SettingFlag("--retrieval-gate", "retrieval gate",
                                  f"whether a window retrieves at all: {{strategies}}; with {setting('rerank')} the "
                                  "score gate decides before it, the lm gate after it", stage=GATE),
    "gate_threshold": SettingFlag("--gate-threshold", "retrieval gate",
                                  "the score gate's threshold, a fraction (0 to 1) of the query's maximum attainable "
                                  "score; the lm gate's, the nats the passage must save on the "
                                  f"{setting('rerank_tokens')} tokens (default 2, chosen on validation data)"),
    "num_passages": SettingFlag("--num-passages", "several passages",
                                "n: passages put in front of the text, the most relevant nearest it, each cut to "
                                f"{setting('max_doc_tokens')} (default %(default)s; with {setting('rerank')} the "
                                "chosen one first, then retrieval order)"),
    "max_context_doc_tokens": SettingFlag("--max-context-doc-tokens", "several passages",
                                          "cap on the tokens of all the passages in context, separators included; at "
                                          "the cap the least relevant give way (default and at most: n × "
                                          f"{setting('max_doc_tokens')})"),
    "ensemble_size": SettingFlag("--ensemble", "several passages",
                                 "n > 1: mix the next-token probabilities of the top n passages, one in context each, "
                                 "weighted by softmax(retrieval score / "
                                 f"{setting('ensemble_temperature')}) (default %(default)s: no ensemble)"),
    "ensemble_temperature": SettingFlag("--ensemble-temperature", "several passages",
                                        "τ of the ensemble's weights (default %(default)s)"),
}
"""The RALM settings a front end offers, in the order it lists them: each one's flag, group and help (its default is
:class:`RalmSettings`'). The command line's flags are generated from it
(:func:`hf_ralm.cli.settings.add_ralm_arguments`); ``base_model_name_or_path`` (``--model``) and ``passage_template``
are not listed."""
