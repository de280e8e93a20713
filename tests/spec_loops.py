"""Plain loops written from issue 10's words, one window (or one generation step) at a time with full forwards, that
the tests hold gates, several passages and ensembles to; and a deterministic retriever whose scores have a known
maximum per query.

* Several passages: the top n passages (the chosen one first) go in front of the text, most relevant nearest it,
  each encoded as one passage alone and cut to max_doc_tokens, a blank-line separator between two; their total,
  separators included, is capped by max_context_doc_tokens, at most (and by default) n x max_doc_tokens (the most
  relevant are kept whole first, the first that does not fit keeps its beginning); they overwrite the window's
  oldest tokens, as one passage does.
* Ensembles: p(x_i | x_<i) = sum_j w_j p(x_i | [d_j; x_<i]), w = softmax(retrieval scores / tau), here summed in
  probability space in float64.
* Gates: score: the top passage's score over the query's maximum attainable score must reach the threshold; lm: the
  passage stays when the summed NLL of the last s' prefix tokens with it is not higher than without it.
"""

from __future__ import annotations

import math
import random
import zlib

import torch

from conftest import TINY_VOCAB_WORDS
from hf_ralm.model_inputs import passage_prefix
from hf_ralm.passages import Passage
from test_reranking import full_nlls

WORDS = TINY_VOCAB_WORDS[:60]


class ScoredRetriever:
    """Passages drawn from a hash of the query, best first, with a known maximum score per query (``max_scores``).
    The n-th distinct query it sees gets, by n mod 5, k passages, none, one, k, or k-1, and a top score of 0.9, 0.1,
    0.6, 0.3 or 0.75 of its maximum: any evaluation of five windows or more meets every case, and a plain loop that
    asks for the windows in order gets what the fast path got. Records the queries and the k asked."""

    COUNTS = (lambda k: k, lambda k: 0, lambda k: 1, lambda k: k, lambda k: max(1, k - 1))
    TOP = (0.9, 0.1, 0.6, 0.3, 0.75)

    def __init__(self, seed: int = 0, max_words: int = 12):
        self.seed, self.max_words = seed, max_words
        self.calls: list[tuple[list[str], int]] = []
        self.order: dict[str, int] = {}

    def _bound(self, query: str) -> float:
        return 6.0 + (zlib.crc32(query.encode()) % 5)

    def _found(self, query: str, k: int) -> list[Passage]:
        case = self.order.setdefault(query, len(self.order)) % 5
        rng = random.Random(zlib.crc32(query.encode()) ^ self.seed)
        top = self.TOP[case] * self._bound(query)
        scores = [top] + sorted((rng.uniform(0.01, top) for _ in range(k - 1)), reverse=True)
        return [Passage(f"{zlib.crc32(query.encode())}-{i}", rng.choice(["", "rome", "music"]),
                        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, self.max_words))), score)
                for i, score in enumerate(scores[: self.COUNTS[case](k)])]

    def retrieve(self, queries, k=1):
        self.calls.append((list(queries), k))
        return [self._found(query, k) for query in queries]

    def max_scores(self, queries):
        return [self._bound(query) for query in queries]


def spec_prefix(tokenizer, passages, config, separator: str = "\n\n") -> list[int]:
    """The passages (most relevant first) as they go in front of the text."""
    if not passages:
        return passage_prefix(tokenizer, None, config)
    sep = tokenizer.encode(separator, add_special_tokens=False)
    segments = [passage_prefix(tokenizer, p, config) + (sep if i > 0 else []) for i, p in enumerate(passages)]
    cap = config.num_passages * config.max_doc_tokens
    cap = cap if config.max_context_doc_tokens is None else min(cap, config.max_context_doc_tokens)
    kept, used = [], 0
    for segment in segments:  # most relevant first
        if used >= cap:
            break
        kept.append(segment[: cap - used])
        used += len(kept[-1])
    segments = kept
    return [t for segment in reversed(segments) for t in segment]


def plain_window_nlls(model, tokenizer, ids, windows, in_context, config, separator: str = "\n\n") -> torch.Tensor:
    """Per-token NLLs (NaN for token 0): every window in one full forward, ``in_context[w.index]`` (passages, most
    relevant first) written over its first positions."""
    nll = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    for w in windows:
        text = ids[w.begin : w.end]
        prefix = spec_prefix(tokenizer, in_context[w.index], config, separator)
        tokens = (prefix + text[len(prefix) :])[: len(text)]
        nll[w.score_begin : w.end] = full_nlls(model, tokens, text)[w.score_begin - w.begin - 1 :]
    return nll


def plain_ensemble_nlls(model, tokenizer, ids, windows, members, config) -> torch.Tensor:
    """Per-token NLLs of the ensemble: each window once per member passage, probabilities mixed with the softmax of
    the scores over the temperature; a window without members is the plain window."""
    nll = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    for w in windows:
        found = members[w.index]
        if not found:
            nll[w.score_begin : w.end] = plain_window_nlls(model, tokenizer, ids, [w], {w.index: []},
                                                           config)[w.score_begin : w.end]
            continue
        exps = [math.exp(p.score / config.ensemble_temperature) for p in found]
        weights = [e / sum(exps) for e in exps]
        mixture = 0
        for passage, weight in zip(found, weights):
            row = plain_window_nlls(model, tokenizer, ids, [w], {w.index: [passage]}, config)[w.score_begin : w.end]
            mixture = mixture + weight * torch.exp(-row)
        nll[w.score_begin : w.end] = -torch.log(mixture)
    return nll


def ranking_nll(model, tokenizer, ids, w, passage, config) -> float:
    """The summed NLL of the last s' tokens before the window's first scored token (never its first token), with
    ``passage`` (or none) written over the window."""
    text = ids[w.begin : w.end]
    prefix = passage_prefix(tokenizer, passage, config)
    row = full_nlls(model, (prefix + text[len(prefix) :])[: len(text)], text)
    first = max(w.begin + 1, w.score_begin - config.rerank_tokens)
    return sum(float(row[t - w.begin - 1]) for t in range(first, w.score_begin))
