"""``RalmConfig``: the few settings In-Context RALM adds on top of a frozen causal LM, with their defaults and their one
validation ([`RalmConfig.validate`][hf_ralm.RalmConfig.validate]). Their defaults, types, flags and checks of single
values are plain Python in [`hf_ralm.config.settings`][hf_ralm.config.settings] (what the command line reads without
transformers); here they become a ``PreTrainedConfig``."""

from __future__ import annotations

from transformers import AutoConfig, PreTrainedConfig

from ..errors import SettingError, setting
from .passage_template import passage_text
from .query_lengths import SPARSE_QUERY_LENGTH, default_query_length
from .settings import VALUE_CHECKS, RalmSettings, check_setting_values
from .strategy_settings import GATE, RERANK, check_strategy, declared_strategy, reranks, strategy_names
from .window_checks import check_prefix_room, check_window_overlap


DROPPED_KEYS = frozenset({"num_docs"})
"""Keys that configs saved by earlier versions may hold and that are no longer settings: dropped on loading."""


def __getattr__(name: str) -> tuple[str, ...]:
    """``RERANK_STRATEGIES`` and ``RETRIEVAL_GATES``, the values ``rerank`` and ``retrieval_gate`` take, as earlier
    versions named them: now the registered strategies' names
    ([`hf_ralm.selection.strategies`][hf_ralm.selection.strategies]), read when asked for, so that they include
    strategies registered since."""
    stages = {"RERANK_STRATEGIES": RERANK, "RETRIEVAL_GATES": GATE}
    if name in stages:
        return strategy_names(stages[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RalmConfig(RalmSettings, PreTrainedConfig):
    """Settings of In-Context RALM (Ram et al., 2023); the defaults are the paper's (its fields, with their types and
    defaults, are ``hf_ralm.config.settings.RalmSettings``').

    Args:
        base_model_name_or_path: Hub id or folder of the wrapped causal LM (its weights are never copied).
        retrieval_stride: ``s``, retrieve every this many tokens (the paper's best trade-off: 4).
        query_length: ``ℓ``, the retrieval query is the last this many tokens of the prefix; ``None`` means the
            retriever's default ([`query_length_for`][hf_ralm.RalmConfig.query_length_for]: 32 for sparse retrieval, 64
            for dense and hybrid).
        max_doc_tokens: a passage is cut to this many tokens before it is put in context.
        max_length: window length ``L``; ``None`` means the base model's maximum (a larger value is capped there).
            Must hold a passage and a stride, ``max_doc_tokens + retrieval_stride <= L``, or the settings are
            refused (here, and against the model's maximum when a model uses them:
            [`window_length`][hf_ralm.core.plan.window_length]): a passage then never covers a token evaluation scores,
            nor crowds the text out of a generation context.
        passage_template: how a passage with a title becomes text; a passage without a title is its text alone.
        bos_every_window: put the tokenizer's BOS at the start of *every* window, retrieved or not. The reference
            (default ``False``) gives only windows with a passage a BOS (the passage is encoded with special tokens),
            which flatters retrieval for BOS-sensitive models such as Gemma.
        rerank: how each window's passage is chosen among its ``rerank_candidates`` retrieved passages: ``"none"``
            (retrieval's top one), ``"lm"`` (zero-shot: the passage under which an LM finds the last
            ``rerank_tokens`` tokens of the prefix likeliest), ``"predictive"`` (a trained cross-encoder,
            ``reranker_model``), ``"oracle"`` (the reader's NLL of the window's own target tokens: an upper bound
            that looks at the future) or ``"random"`` (a floor); or a strategy registered since
            (``hf_ralm.selection.strategies``).
        rerank_candidates: ``k``, the retrieved passages a reranker chooses among (16).
        rerank_tokens: ``s'``, the prefix tokens ``"lm"`` ranks on (16).
        reranker_model: the LM that ranks for ``"lm"`` (default: the reader itself; another model works in text, see
            ``hf_ralm.selection.rules``), or the cross-encoder of ``"predictive"`` (a folder or Hub
            id).
        rerank_allow_no_passage: with ``"lm"``, ``"oracle"`` or ``"predictive"``, the window without a passage is one
            more candidate (the predictive reranker reads it as the empty passage).
        rerank_no_passage_margin: with ``rerank_allow_no_passage``, the nats of ranking NLL the best passage must save
            over no passage to be chosen (0.0: the lowest NLL wins; a positive margin keeps a passage out of the
            context unless the LM finds clear evidence that it helps).
        rerank_seed: the seed of ``"random"`` (a choice per window, whatever the batching).
        retrieval_gate: whether a window (a generation stride) retrieves at all: ``"always"`` (the paper),
            ``"score"`` (only when its top passage's retrieval score, divided by the query's maximum attainable
            score, reaches ``gate_threshold``) or ``"lm"`` (only when the passage lowers the reader's NLL of the last
            ``rerank_tokens`` prefix tokens, compared with no passage, by at least ``gate_threshold`` nats). With
            ``rerank``, the score gate decides before reranking (on retrieval's top passage) and the lm gate after it
            (on the chosen passage); see ``hf_ralm.selection.gates``.
        gate_threshold: the ``"score"`` gate's threshold, a fraction of the query's maximum attainable score
            (0: always retrieve, 1: never with BM25); the ``"lm"`` gate's, in nats saved on the ranking tokens
            (``None``: 2.0, chosen on validation data,
            ``hf_ralm.selection.gates.LM_GATE_MARGIN``; 0 keeps the passage
            whenever it does not raise their NLL).
        num_passages: ``n``, the passages put in front of the text: the top ``n`` (with ``rerank``, the chosen
            one first, then the others in retrieval order), the most relevant nearest the text, each cut to
            ``max_doc_tokens``. 1 is the paper.
        max_context_doc_tokens: a cap on the tokens of all the passages in front of the text, separators included
            (``None``, and at most: ``num_passages × max_doc_tokens``,
            [`context_doc_tokens`][hf_ralm.RalmConfig.context_doc_tokens]). At the cap,
            passages are kept from the most relevant on and the first one that does not fit whole is cut to the room
            left (keeping its beginning, as ``max_doc_tokens`` cuts); the rest are left out
            ([`context_prefix`][hf_ralm.core.model_inputs.context_prefix]). With several
            passages, ``L`` must hold them and a stride as it must hold one passage
            ([`check_room`][hf_ralm.RalmConfig.check_room], for the passages actually put in context).
        ensemble_size: ``n > 1`` mixes the next-token probabilities of the top ``n`` passages, one passage in
            context each, weighted by the softmax of their retrieval scores divided by ``ensemble_temperature``
            (REPLUG-style), in evaluation and generation; 1 puts the passages in one context.
        ensemble_temperature: ``τ`` of the ensemble's weights (1.0).

    Every config is checked by [`validate`][hf_ralm.RalmConfig.validate] when it is made (and when it is saved).

    Examples:
        >>> config = RalmConfig(base_model_name_or_path="facebook/opt-125m", retrieval_stride=8)
        >>> config.query_length_for("bm25"), config.query_length_for("dense")
        (32, 64)
        >>> RalmConfig(retrieval_stride=0)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: retrieval_stride must be at least 1, got 0.
    """

    model_type = "ralm"

    def __post_init__(self, **kwargs) -> None:
        super().__post_init__(**kwargs)
        self.validate()

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """A config from a saved ``config.json``'s mapping, as ``transformers.PreTrainedConfig.from_dict`` makes one.

        Keys that are no longer settings (``DROPPED_KEYS``: the ``num_docs`` of older saved configs) are dropped, so
        every saved config still loads.

        Args:
            config_dict: the saved settings.
            **kwargs: what ``PreTrainedConfig.from_dict`` takes besides (``return_unused_kwargs``, settings to
                override).

        Returns:
            The config, checked ([`validate`][hf_ralm.RalmConfig.validate]).

        Examples:
            >>> RalmConfig.from_dict({"retrieval_stride": 8, "num_docs": 1}).retrieval_stride
            8
        """
        config_dict = {key: value for key, value in config_dict.items() if key not in DROPPED_KEYS}
        return super().from_dict(config_dict, **kwargs)

    def validate(self) -> None:
        """Check every setting, alone and together (what each strategy takes, the window's room, ensembles).

        Raises:
            SettingError: a setting is wrong; the message names it (``retrieval_stride``, ...) and says what it takes.

        Examples:
            >>> RalmConfig().validate()
            >>> config = RalmConfig()
            >>> config.max_doc_tokens = 0
            >>> config.validate()
            Traceback (most recent call last):
            ...
            hf_ralm.errors.SettingError: max_doc_tokens must be at least 1, got 0.
        """
        super().validate()
        check_setting_values({name: getattr(self, name) for name in VALUE_CHECKS})
        if self.max_length is not None:
            check_window_overlap(self.max_length, self.retrieval_stride, "retrieval_stride")
        self._validate_rerank()
        self._validate_passages()
        self._validate_gate()

    def check_room(self, max_length: int, prefix_length: int) -> None:
        """Check that a window holds a prefix and a stride.

        Checked for each prefix as it is made, so that a run without retrieval, or whose passages are all short
        enough, is not refused for a passage length it never meets.

        Args:
            max_length: the window length in use.
            prefix_length: the passages actually put in front of the text, in tokens (cut at ``max_doc_tokens`` and,
                with several, at [`context_doc_tokens`][hf_ralm.RalmConfig.context_doc_tokens]).

        Raises:
            SettingError: ``prefix_length + retrieval_stride > max_length``; the message says which setting to lower
                or raise, and to what.

        Examples:
            >>> RalmConfig(max_length=300, num_passages=3, max_doc_tokens=100).check_room(300, 298)
            Traceback (most recent call last):
            ...
            hf_ralm.errors.SettingError: max_length (300) cannot hold the passages of 298 tokens \
(max_context_doc_tokens: 300) and the retrieval_stride (4) tokens after it: lower max_context_doc_tokens to at most \
296 or raise max_length to at least 302.
        """
        several = self.num_passages > 1
        model_max = max_length if self.max_length is None or self.max_length > max_length else None
        check_prefix_room(max_length, prefix_length, self.retrieval_stride,
                          "max_context_doc_tokens" if several else "max_doc_tokens",
                          self.context_doc_tokens if several else self.max_doc_tokens, model_max=model_max)

    @property
    def context_doc_tokens(self) -> int:
        """The most tokens the passages in front of the text take, separators included: ``max_context_doc_tokens``
        up to ``num_passages × max_doc_tokens`` (the default)."""
        most = self.num_passages * self.max_doc_tokens
        return most if self.max_context_doc_tokens is None else min(self.max_context_doc_tokens, most)

    def _validate_rerank(self) -> None:
        if self.rerank_no_passage_margin != 0 and not self.rerank_allow_no_passage:
            raise SettingError(f"{setting('rerank_no_passage_margin')} is how much a passage must beat the no-passage "
                               f"candidate of {setting('rerank_allow_no_passage')}: set "
                               f"{setting('rerank_allow_no_passage')}=True, or drop the margin.")
        check_strategy(self, RERANK)  # the settings only some strategies take, and the strategy's own checks

    def _validate_passages(self) -> None:
        check_ensemble(self, self.ensemble_size)

    def _validate_gate(self) -> None:
        check_strategy(self, GATE)

    @property
    def num_retrieved(self) -> int:
        """Passages retrieved per window: the reranker's candidates, or the ones put in context (or mixed)."""
        return self.rerank_candidates if reranks(self.rerank) else max(self.num_passages, self.ensemble_size)

    def query_length_for(self, retriever) -> int:
        """The query length ``ℓ`` a run with ``retriever`` uses.

        Args:
            retriever: a registered retriever's name such as ``"dense"``
                ([`default_query_length`][hf_ralm.default_query_length]), a retriever or its class (its
                ``default_query_length``; 32 for an object that declares none), or ``None`` (no retrieval: 32).

        Returns:
            ``query_length``, or when it is ``None`` the default of ``retriever``, in tokens.

        Examples:
            >>> RalmConfig().query_length_for("hybrid"), RalmConfig(query_length=8).query_length_for("hybrid")
            (64, 8)
        """
        if self.query_length is not None:
            return self.query_length
        if retriever is None or isinstance(retriever, str):
            return default_query_length(retriever)
        return getattr(retriever, "default_query_length", SPARSE_QUERY_LENGTH)

    def passage_text(self, title: str | None, text: str) -> str:
        """The text put in context for a passage, under this config's ``passage_template``.

        Args:
            title: the passage's title (``None`` or empty: none).
            text: the passage's text.

        Returns:
            [`passage_text`][hf_ralm.passage_text] of them: ``title + "\\n" + text`` by default, ``text`` alone
                without a title.
        """
        return passage_text(title, text, self.passage_template)


def check_ensemble(config: RalmConfig, ensemble_size: int) -> None:
    """Raise a ``ValueError`` unless ``config`` can mix ``ensemble_size`` passages: an ensemble puts one passage in
    each of its contexts, so it is not combined with reranking (which chooses one passage), with several passages in
    one context, or with the lm gate (which weighs one passage against none).

    Examples:
        >>> check_ensemble(RalmConfig(), 4)
        >>> check_ensemble(RalmConfig(num_passages=2), 4)   # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: ensemble_size=4 mixes the top passages, one in each context; num_passages=2 ...
    """
    if ensemble_size <= 1:
        return
    if reranks(config.rerank):
        raise SettingError(f"{setting('ensemble_size')}={ensemble_size} mixes the top passages of each window or "
                           f"stride, while {setting('rerank')}={config.rerank!r} puts one chosen passage in context; "
                           f"the two are not combined: use {setting('ensemble_size')}=1 to rerank, or "
                           f"{setting('rerank')}='none' to mix.")
    if config.num_passages > 1:
        raise SettingError(f"{setting('ensemble_size')}={ensemble_size} mixes the top passages, one in each context; "
                           f"{setting('num_passages')}={config.num_passages} puts several in one context: use one or "
                           "the other.")
    if declared_strategy(GATE, config.retrieval_gate).one_passage:
        raise SettingError(f"{setting('ensemble_size')}={ensemble_size} mixes several passages, while "
                           f"{setting('retrieval_gate')}={config.retrieval_gate!r} weighs one passage against none: "
                           f"use {setting('retrieval_gate')}='score' with an ensemble.")


AutoConfig.register("ralm", RalmConfig)
