"""In-Context RALM perplexity: text → tokens → windows → queries → passages → window inputs → scores.

Example:
    >>> from hf_ralm import RetrievalAugmentedModel
    >>> model = RetrievalAugmentedModel.from_pretrained("HuggingFaceTB/SmolLM2-135M", retriever="bm25",
    ...                                                 index_dir="index/", corpus="wiki.jsonl.gz")  # doctest: +SKIP
    >>> result = evaluate_perplexity(model.base_model, model.tokenizer, text, model.retriever,
    ...                              model.config)                                                   # doctest: +SKIP
    >>> result.figures["token_ppl"]                                                                  # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
from tqdm.auto import tqdm

from .configuration_ralm import RalmConfig
from .retrieval.base import Passage, Retriever
from .retrieval.files import load_retrieval_file, retrieval_records
from .model_inputs import window_prefixes
from .modeling_utils import resolve_max_length
from .scoring import score_windows
from .windows import Window, check_count, count_words, perplexity_figures, plan_windows, query_span


@dataclass
class RalmEvalResult:
    """What one evaluation produced. ``token_nlls[t]`` is the NLL of token ``t`` (NaN for token 0) and
    ``token_windows[t]`` the window that scored it, so ``passages[token_windows[t]]`` were in context for it."""

    figures: dict
    ids: list[int]
    token_nlls: torch.Tensor | None
    token_windows: torch.Tensor | None
    windows: list[Window]
    queries: list[str | None]
    passages: list[list[Passage]]
    timings: dict = field(default_factory=dict)

    def retrieval_records(self, tokenizer) -> list[dict]:
        """The evaluation's retrievals in the paper's retrieval-file format."""
        futures = [tokenizer.decode(self.ids[w.prev_end : w.end]) for w in self.windows]
        return retrieval_records(self.windows, self.queries, futures, self.passages)


def window_queries(tokenizer, ids: Sequence[int], windows: Sequence[Window], query_length: int) -> list[str | None]:
    """The decoded query of every window (``None`` for window 0, which gets no retrieval)."""
    spans = [query_span(w, query_length) for w in windows]
    return [None if span is None else tokenizer.decode(ids[span[0] : span[1]]) for span in spans]


def retrieve_for_windows(
    retriever: Retriever | None, queries: Sequence[str | None], k: int, batch_size: int = 512, show_progress=True
) -> list[list[Passage]]:
    """Batched retrieval of ``k`` passages for every window that has a query."""
    passages: list[list[Passage]] = [[] for _ in queries]
    if retriever is None:
        return passages
    todo = [i for i, q in enumerate(queries) if q is not None]
    for start in tqdm(range(0, len(todo), batch_size), desc="Retrieving", unit="batch", disable=not show_progress):
        chunk = todo[start : start + batch_size]
        for i, found in zip(chunk, retriever.retrieve([queries[i] for i in chunk], k=k)):
            passages[i] = list(found)
    return passages


def tokenize_text(tokenizer, text: str, max_eval_tokens: int | None = None) -> list[int]:
    """Token ids of the whole text, without special tokens (as the reference), optionally cut to the first
    ``max_eval_tokens``."""
    if not text:
        raise ValueError("The dataset is empty: there is no text to evaluate.")
    return first_tokens(tokenizer(text, add_special_tokens=False)["input_ids"], max_eval_tokens)


def first_tokens(ids: Sequence[int], max_eval_tokens: int | None = None) -> list[int]:
    """The first ``max_eval_tokens`` ids (all of them when ``None``).

    Example:
        >>> first_tokens([5, 6, 7], 2)
        [5, 6]
    """
    if max_eval_tokens is None:
        return list(ids)
    check_count("max_eval_tokens", max_eval_tokens)
    return list(ids[:max_eval_tokens])


def evaluate_retrieval(
    model,
    tokenizer,
    text_or_ids: str | Sequence[int],
    retriever: Retriever | None,
    config: RalmConfig,
    retrieval_file: str | None = None,
    max_eval_tokens: int | None = None,
    show_progress: bool = True,
) -> RalmEvalResult:
    """Tokens, windows, queries and passages of an evaluation, without scoring (``hf-ralm retrieve``).

    Passages come from ``retrieval_file`` when given (the reference's JSON format), else from ``retriever`` (the
    top passage of every window's query, the one put in context), else none. The figures count the windows
    (``num_windows``), the retrievals made or read from the file (``num_retrievals``: every window but window 0, or
    none without retrieval), those that found a passage (``num_windows_with_passage``) and those that found nothing
    (``num_empty_retrievals``).
    """
    t0 = time.perf_counter()
    if isinstance(text_or_ids, str):
        text = text_or_ids
        ids = tokenize_text(tokenizer, text, max_eval_tokens)
        if max_eval_tokens and len(ids) == max_eval_tokens:
            text = tokenizer.decode(ids)
    else:
        ids = first_tokens(text_or_ids, max_eval_tokens)
        text = tokenizer.decode(ids)
    max_length = resolve_max_length(model, config.max_length)
    windows = plan_windows(len(ids), max_length, config.retrieval_stride)
    queries = window_queries(tokenizer, ids, windows, config.query_length_for(retriever))
    timings = {"tokenize_s": time.perf_counter() - t0}

    t0 = time.perf_counter()
    if retrieval_file is not None:
        passages = load_retrieval_file(retrieval_file, windows)
    else:
        passages = retrieve_for_windows(retriever, queries, k=1, show_progress=show_progress)
    timings["retrieval_s"] = time.perf_counter() - t0
    retrieving = retrieval_file is not None or retriever is not None
    num_retrievals = sum(1 for w in windows if w.has_retrieval) if retrieving else 0
    with_passage = sum(1 for w in windows if w.has_retrieval and passages[w.index])
    figures = {
        "num_tokens": len(ids),
        "num_words": count_words(text),
        "num_windows": len(windows),
        "num_retrievals": num_retrievals,
        "num_windows_with_passage": with_passage,
        "num_empty_retrievals": num_retrievals - with_passage,
        "max_length": max_length,
    }
    return RalmEvalResult(figures, ids, None, None, windows, queries, passages, timings)


def evaluate_perplexity(
    model,
    tokenizer,
    text_or_ids: str | Sequence[int],
    retriever: Retriever | None,
    config: RalmConfig,
    retrieval_file: str | None = None,
    max_eval_tokens: int | None = None,
    batch_size: int = 8,
    reuse_prefix_kv: bool = True,
    show_progress: bool = True,
) -> RalmEvalResult:
    """In-Context RALM perplexity of a text (or of token ids) under the paper's conventions.

    Passages come from ``retrieval_file`` when given, else from ``retriever``, else none. Word-level perplexity
    counts the spaces of the text (of the decoded tokens when ids are given or ``max_eval_tokens`` cuts the text).
    """
    result = evaluate_retrieval(model, tokenizer, text_or_ids, retriever, config, retrieval_file, max_eval_tokens,
                                show_progress)
    t0 = time.perf_counter()
    prefixes = window_prefixes(tokenizer, result.windows, result.passages, config)
    nlls = score_windows(model, result.ids, result.windows, prefixes, batch_size, reuse_prefix_kv, show_progress)
    scoring_s = time.perf_counter() - t0

    token_windows = torch.full((len(result.ids),), -1, dtype=torch.long)
    for w in result.windows:
        token_windows[w.score_begin : w.end] = w.index
    num_scored = sum(w.num_scored for w in result.windows)
    figures = perplexity_figures(float(nlls[1:].sum()), len(result.ids), num_scored, result.figures["num_words"])
    result.figures = {**figures, **result.figures, "scored_tokens_per_s": num_scored / scoring_s}
    result.timings["scoring_s"] = scoring_s
    result.token_nlls, result.token_windows = nlls, token_windows
    return result
