"""The plan of an evaluation, the one place text becomes windows: text → token ids → windows → queries → retrieved
candidates. Evaluation (``eval-lm``, ``retrieve``), the reranker's training data, the reranking tables and every
benchmark plan their windows here, so they all score the same tokens, ask the same queries and count the same words.

Examples:
    >>> from hf_ralm import RalmConfig
    >>> class Characters:   # a tokenizer with one token per character
    ...     def __call__(self, text, add_special_tokens=False): return {"input_ids": [ord(c) for c in text]}
    ...     def decode(self, ids): return "".join(map(chr, ids))
    >>> plan = prepare("the emperor of rome ruled", Characters(), RalmConfig(retrieval_stride=4, query_length=8),
    ...                max_length=12)
    >>> len(plan.windows), plan.num_words, plan.queries[1], [len(chunk) for chunk in plan.chunks(2)]
    (5, 4, 'emperor ', [2, 2, 1])
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from ..utils.progress import tqdm

from ..config.configuration_ralm import RalmConfig
from ..errors import RalmWarning, SettingError, setting
from .passages import Passage
from .modeling_utils import resolve_max_length, vocabulary_size
from .perplexity import count_words
from ..utils.checks import check_count, check_vocabulary, refuse_type, token_id_list
from .windows import Window, plan_windows, query_span


@dataclass
class WindowPlan:
    """A text's windows and their queries, and the passages retrieved for them (on demand, once per window).

    Attributes:
        ids: the evaluated token ids.
        num_words: the reference's word count of the evaluated text (of the decoded ids when they were given or cut).
        windows: the sliding windows of ``max_length`` tokens, one every ``retrieval_stride`` tokens.
        queries: ``queries[w]`` is window ``w``'s query: the decoded last ``query_length`` tokens before its first
            scored token (``None`` for window 0).
        max_length: the window length ``L``.
        query_length: the query length ``ℓ``.
        retriever: what [`candidates`][hf_ralm.core.plan.WindowPlan.candidates] retrieves with (``None``: nothing).
    """

    ids: list[int]
    num_words: int
    windows: list[Window]
    queries: list[str | None]
    max_length: int
    query_length: int
    retriever: object | None = None
    _found: dict[int, list[Passage]] = field(default_factory=dict, repr=False)
    _depth: int = field(default=0, repr=False)

    def chunks(self, chunk_size: int, start: int = 0) -> Iterator[list[Window]]:
        """The windows from window ``start`` on, ``chunk_size`` at a time (what a run's chunk of records holds).

        Args:
            chunk_size: the windows per chunk.
            start: the index of the first window.

        Yields:
            Lists of at most ``chunk_size`` consecutive windows.
        """
        check_count("chunk_size", chunk_size)
        for first in range(start, len(self.windows), chunk_size):
            yield self.windows[first : first + chunk_size]

    def candidates(self, windows: Sequence[Window], k: int, show_progress: bool = False) -> list[list[Passage]]:
        """The top ``k`` passages of each of ``windows``, retrieved in one batched call for the windows not retrieved
        before at that depth.

        Args:
            windows: windows of this plan.
            k: the passages per window.
            show_progress: show a progress bar of the queries.

        Returns:
            Per window, its top ``k`` passages (``[]`` for window 0, and for every window without a retriever).
        """
        check_count("k", k)
        if self.retriever is None:
            return [[] for _ in windows]
        if k != self._depth:
            self._found, self._depth = {}, k
        todo = [w.index for w in windows if w.index not in self._found and self.queries[w.index] is not None]
        for i, found in zip(todo, retrieve(self.retriever, [self.queries[i] for i in todo], k, show_progress)):
            self._found[i] = found
        return [self._found.get(w.index, []) for w in windows]


def window_futures(tokenizer, ids: Sequence[int], windows: Sequence[Window]) -> list[str]:
    """Each window's ``future`` as a retrieval file records it (what identifies the text the file was made for).

    Args:
        tokenizer: the reader's tokenizer.
        ids: the text's token ids.
        windows: its windows.

    Returns:
        Per window, its tokens after the previous window's end, decoded.
    """
    return [tokenizer.decode(list(ids[w.prev_end : w.end])) for w in windows]


def window_length(model, config: RalmConfig, *, retrieving: bool = False) -> int:
    """The window length ``L`` of ``model`` under ``config``, checked to hold what retrieval puts in a window.

    The one place it is resolved: [`prepare`][hf_ralm.prepare] for a text's plan (every evaluation, ``--compare`` and
    ``rerank-data`` read the plan's ``max_length``), and generation and the lm-eval model once for their contexts.
    With ``retrieving``, ``L`` must hold the longest passage prefix the settings allow and a stride
    ([`check_room`][hf_ralm.RalmConfig.check_room]), so no passage is put where the text it scores or generates
    should be, whatever the passages' lengths. Settings that leave a window with a full prefix less than a quarter of
    ``L`` for its own text are said in a warning.

    Args:
        model: the reader, whose maximum length caps ``L``.
        config: the settings: ``max_length`` (``None``: the model's maximum), and with ``retrieving``
            ``max_doc_tokens`` (or ``max_context_doc_tokens`` with several passages) and ``retrieval_stride``.
        retrieving: whether the run puts passages in context.

    Returns:
        ``config.max_length`` capped at the model's maximum (the model's maximum when ``None``).

    Raises:
        SettingError: with ``retrieving``, a window of ``L`` tokens cannot hold the longest passage prefix and a
            stride (the message names both settings).

    Examples:
        ```python
        window_length(model, RalmConfig(max_length=512), retrieving=True)   # 512
        window_length(model, RalmConfig(max_length=256), retrieving=True)   # refused: 256 + 4 > 256
        ```
    """
    max_length = resolve_max_length(model, config.max_length)
    if retrieving:
        prefix = config.context_doc_tokens
        config.check_room(max_length, prefix)
        if 4 * (max_length - prefix) < max_length:
            bound = "max_context_doc_tokens" if config.num_passages > 1 else "max_doc_tokens"
            warnings.warn(RalmWarning(
                f"a window with a passage prefix of {setting(bound)} ({prefix}) tokens keeps only "
                f"{max_length - prefix} of its {max_length} tokens ({setting('max_length')}) for its own text: "
                f"lower {setting(bound)} or raise {setting('max_length')} to keep more of it."), stacklevel=2)
    return max_length


def prepare(text_or_ids: str | Sequence[int], tokenizer, config: RalmConfig, retriever=None, *, model=None,
            max_length: int | None = None, max_eval_tokens: int | None = None,
            retrieving: bool | None = None) -> WindowPlan:
    """The plan of an evaluation: its token ids, windows and queries, and the retrieval for them.

    Args:
        text_or_ids: a text (tokenized without special tokens, as the reference does) or its token ids.
        tokenizer: the reader's tokenizer (it also decodes the queries).
        config: the settings: ``retrieval_stride``, and ``query_length`` (or the retriever's default) for the queries.
        retriever: what [`WindowPlan.candidates`][hf_ralm.core.plan.WindowPlan.candidates] retrieves with (``None``:
            nothing).
        model: the reader, whose window length the plan resolves
            ([`window_length`][hf_ralm.core.plan.window_length]) and keeps as its ``max_length``.
        max_length: the window length, for a plan made without a reader; give ``model`` or this, not both.
        max_eval_tokens: evaluate only the first this many tokens.
        retrieving: whether passages go in context, for the window length's check (by default: when there is a
            retriever).

    Returns:
        The [`WindowPlan`][hf_ralm.core.plan.WindowPlan].

    Raises:
        TypeError: neither or both of ``model`` and ``max_length`` are given.
        InputTypeError: ``text_or_ids`` is neither a text nor token ids.
        SettingError: the text is empty, its ids are outside the reader's vocabulary, or the window length cannot
            hold a passage and a stride; each refused in one line before anything runs.

    Examples:
        ```python
        plan = prepare(text, tokenizer, config, retriever, model=model)
        for chunk in plan.chunks(256):
            passages = plan.candidates(chunk, k=16)
        ```
    """
    if (model is None) == (max_length is None):
        raise TypeError("prepare() takes the reader (model=...), whose window length the plan resolves, or the "
                        "window length itself (max_length=...): exactly one of them.")
    if max_length is None:
        retrieving = retriever is not None if retrieving is None else retrieving
        max_length = window_length(model, config, retrieving=retrieving)
    ids, text = evaluation_tokens(tokenizer, text_or_ids, max_eval_tokens,
                                  vocabulary_size(model) if model is not None else None)
    windows = plan_windows(len(ids), max_length, config.retrieval_stride)
    query_length = config.query_length_for(retriever)
    return WindowPlan(ids, count_words(text), windows, window_queries(tokenizer, ids, windows, query_length),
                      max_length, query_length, retriever)


TEXT_OR_IDS = "a text (str) or its token ids (a list of int, or a 1-D tensor)"
"""What an evaluation's ``text_or_ids`` takes, as its refusals say."""


def evaluation_tokens(tokenizer, text_or_ids: str | Sequence[int], max_eval_tokens: int | None,
                      vocab_size: int | None = None) -> tuple[list[int], str]:
    """The token ids an evaluation scores, and the text their words are counted in.

    Args:
        tokenizer: the reader's tokenizer.
        text_or_ids: a text, or its token ids.
        max_eval_tokens: evaluate only the first this many tokens (at least 2).
        vocab_size: the reader's vocabulary, which given ids must be inside (``None``: not checked).

    Returns:
        The ids, and the text (the decoded ids when ids are given or ``max_eval_tokens`` cuts the text).

    Raises:
        InputTypeError: ``text_or_ids`` is neither a text nor token ids
            ([`token_id_list`][hf_ralm.utils.checks.token_id_list]; a list of texts is told to join them first).
        SettingError: no ids, ids outside the vocabulary
            ([`check_vocabulary`][hf_ralm.utils.checks.check_vocabulary]), or ``max_eval_tokens`` below 2; each in
            one line naming ``text_or_ids``.

    Examples:
        >>> evaluation_tokens(None, ["the king", "the queen"], None)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.InputTypeError: text_or_ids takes a text (str) or its token ids (a list of int, or a 1-D \
tensor), got a list (['the king', 'the queen']): join a dataset's rows into one text first (hf_ralm.join_rows(rows), \
as hf-ralm eval-lm joins them), or evaluate each text on its own.
    """
    if max_eval_tokens is not None:
        check_count("max_eval_tokens", max_eval_tokens, minimum=2)  # token 0 is never scored
    if not isinstance(text_or_ids, str):
        if isinstance(text_or_ids, (list, tuple)) and text_or_ids and isinstance(text_or_ids[0], str):
            refuse_type("text_or_ids", text_or_ids, TEXT_OR_IDS, "join a dataset's rows into one text first "
                        "(hf_ralm.join_rows(rows), as hf-ralm eval-lm joins them), or evaluate each text on its own")
        ids = first_tokens(token_id_list("text_or_ids", text_or_ids, TEXT_OR_IDS), max_eval_tokens)
        if not ids:
            raise SettingError(f"{setting('text_or_ids')} holds no token ids: give a text or its ids (two at least, "
                               "as the first token is never scored).")
        check_vocabulary("text_or_ids", ids, vocab_size)
        return ids, tokenizer.decode(ids)
    ids = tokenize_text(tokenizer, text_or_ids, max_eval_tokens)
    return ids, tokenizer.decode(ids) if max_eval_tokens and len(ids) == max_eval_tokens else text_or_ids


def tokenize_text(tokenizer, text: str, max_eval_tokens: int | None = None) -> list[int]:
    """The token ids of a whole text, without special tokens (as the reference tokenizes it).

    Args:
        tokenizer: the reader's tokenizer.
        text: the text.
        max_eval_tokens: keep only the first this many ids (``None``: all of them).

    Returns:
        The token ids.

    Raises:
        ValueError: the text is empty (a text of whitespace alone is evaluated, with a warning).
    """
    if not text:
        raise ValueError("The dataset is empty: there is no text to evaluate.")
    if not text.strip():  # the command line refuses it; a Python caller may have read the wrong file
        warnings.warn(RalmWarning(f"the text holds only whitespace ({len(text)} characters): its perplexity measures "
                                  "the model's guesses of spacing, not of any words. Check what was read."),
                      stacklevel=3)
    return first_tokens(tokenizer(text, add_special_tokens=False)["input_ids"], max_eval_tokens)


def first_tokens(ids: Sequence[int], max_eval_tokens: int | None = None) -> list[int]:
    """The first ids of a text.

    Args:
        ids: the token ids.
        max_eval_tokens: how many (``None``: all of them).

    Returns:
        The first ``max_eval_tokens`` ids.

    Examples:
        >>> first_tokens([5, 6, 7], 2)
        [5, 6]
    """
    if max_eval_tokens is None:
        return list(ids)
    check_count("max_eval_tokens", max_eval_tokens)
    return list(ids[:max_eval_tokens])


def window_queries(tokenizer, ids: Sequence[int], windows: Sequence[Window], query_length: int) -> list[str | None]:
    """The decoded query of every window.

    Args:
        tokenizer: the reader's tokenizer.
        ids: the text's token ids.
        windows: its windows.
        query_length: ``ℓ``, the query's tokens (the last before a window's first scored token).

    Returns:
        Per window, its query (``None`` for window 0, which gets no retrieval).
    """
    spans = [query_span(w, query_length) for w in windows]
    return [None if span is None else tokenizer.decode(ids[span[0] : span[1]]) for span in spans]


def retrieve(retriever, queries: Sequence[str], k: int, show_progress: bool = False,
             batch_size: int = 512) -> list[list[Passage]]:
    """The top passages of each query, under a bar of queries (a chunk's retrieval in a run names itself on the run's
    bar: [`hf_ralm.utils.progress`][hf_ralm.utils.progress]).

    Args:
        retriever: what retrieves (its ``retrieve``).
        queries: the queries.
        k: the passages per query.
        show_progress: show the bar.
        batch_size: the queries per call of ``retriever.retrieve``.

    Returns:
        Per query, its top ``k`` passages.
    """
    found: list[list[Passage]] = []
    with tqdm(total=len(queries), desc="Retrieving", unit="query", disable=not show_progress or not queries) as bar:
        for start in range(0, len(queries), batch_size):
            batch = list(queries[start : start + batch_size])
            found.extend(list(passages) for passages in retriever.retrieve(batch, k=k))
            bar.update(len(batch))
    return found
