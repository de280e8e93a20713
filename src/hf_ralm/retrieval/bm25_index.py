"""A BM25 index built in memory that grows with the vocabulary and the sparse matrix, not with the corpus's text.

bm25s builds its index from every passage's tokens held as Python lists (about 3.8 GB for the 666k passages of the
Wikipedia sample, some 120 GB projected for the paper's 21M). Here the passages stream through once: each
passage's analysed terms become the ids of its distinct terms and their counts, appended to compact arrays
(:class:`TermCounts`: 4 bytes per term id, 2 per count), and its text is not kept. Then, with the corpus's document
frequencies and mean length known, :func:`bm25_matrix` turns the counts into bm25s's score matrix (CSC: one column
per term, its passages in order) a batch of passages at a time, with bm25s's own arithmetic (Lucene's idf,
Robertson's term-frequency part, float64 rounded to float32), so the scores are bm25s's to the bit;
:func:`save_bm25s` writes the folder bm25s loads. Term ids are numbered by first appearance (bm25s numbers them in a
set's order, which changes from run to run; retrieval does not depend on it).

Example:
    >>> counts = count_terms([["rome", "emperor", "rome"], ["sea", "sailor"], ["rome"]])
    >>> counts.vocab, counts.num_docs
    ({'rome': 0, 'emperor': 1, 'sea': 2, 'sailor': 3}, 3)
    >>> matrix = bm25_matrix(counts, k1=0.9, b=0.4)
    >>> matrix["indptr"].tolist(), matrix["indices"].tolist()   # "rome" is in passages 0 and 2
    ([0, 2, 3, 4, 5], [0, 2, 0, 1, 1])
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

BATCH_DOCS = 10_000  # passages whose counts become one batch of arrays (and are scored together)


@dataclass
class TermCounts:
    """Per passage, its distinct terms' ids and counts, in passage order, in batches of arrays: ``term_ids[j]`` and
    ``counts[j]`` hold batch ``j``'s terms (passage after passage), ``num_terms[j]`` how many distinct terms each of
    its passages has, ``lengths[j]`` each passage's number of terms (repeats counted). ``vocab``: term → id."""

    vocab: dict[str, int] = field(default_factory=dict)
    term_ids: list[np.ndarray] = field(default_factory=list)
    counts: list[np.ndarray] = field(default_factory=list)
    num_terms: list[np.ndarray] = field(default_factory=list)
    lengths: list[np.ndarray] = field(default_factory=list)

    @property
    def num_docs(self) -> int:
        return sum(len(batch) for batch in self.lengths)

    @property
    def nbytes(self) -> int:
        """The bytes of its arrays (the vocabulary's Python objects not counted)."""
        return sum(a.nbytes for arrays in (self.term_ids, self.counts, self.num_terms, self.lengths) for a in arrays)


def count_terms(analysed: Iterable[list[str]], batch_docs: int = BATCH_DOCS) -> TermCounts:
    """The :class:`TermCounts` of passages given as their analysed terms (read once, one at a time)."""
    counts = TermCounts()
    vocab = _Vocabulary()
    ids: list[int] = []
    lengths: list[int] = []

    def close_batch() -> None:
        # each (passage, term id) pair as one int64 key, passage in the high half: np.unique sorts the keys, so each
        # passage's distinct terms come out together, passage after passage, ids ascending within a passage
        docs = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        keys, repeats = np.unique((docs << 32) | np.asarray(ids, dtype=np.int64), return_counts=True)
        counts.term_ids.append((keys & 0xFFFFFFFF).astype(np.int32))
        # 2 bytes a count; a passage repeating a term 65,536 times or more (a whole book as one row) keeps 4
        counts.counts.append(repeats.astype(np.uint16 if repeats.size == 0 or repeats.max() < 2**16 else np.uint32))
        counts.num_terms.append(np.bincount(keys >> 32, minlength=len(lengths)).astype(np.int32))
        counts.lengths.append(np.asarray(lengths, dtype=np.int32))
        ids.clear()
        lengths.clear()

    for terms in analysed:
        ids.extend(map(vocab.__getitem__, terms))  # a new term gets the next id (_Vocabulary.__missing__)
        lengths.append(len(terms))
        if len(lengths) == batch_docs:
            close_batch()
    if lengths:
        close_batch()
    counts.vocab = dict(vocab)  # a plain dict: looking up a term not in it must not add it
    return counts


class _Vocabulary(dict):
    """term -> id, numbered by first appearance: a term not yet seen gets the next id when looked up."""

    def __missing__(self, term: str) -> int:
        term_id = self[term] = len(self)
        return term_id


def bm25_matrix(counts: TermCounts, k1: float, b: float) -> dict:
    """bm25s's score matrix of ``counts`` for Lucene's BM25 (``method="lucene"``): ``data`` (float32 scores),
    ``indices`` (int32 passage ids) and ``indptr`` (int32, one column per term of the vocabulary), and
    ``num_docs``. A term's score in a passage is ``idf · tf / (tf + k1 · (1 - b + b · dl / avgdl))`` with
    ``idf = log(1 + (N - df + 0.5) / (df + 0.5))``, computed as bm25s computes it."""
    num_docs, num_vocab = counts.num_docs, len(counts.vocab)
    lengths = np.concatenate(counts.lengths) if counts.lengths else np.zeros(0, dtype=np.int32)
    avg_length = lengths.mean() if num_docs else 0.0  # as bm25s: the float64 mean of the passages' lengths
    df = np.zeros(num_vocab, dtype=np.int64)
    for term_ids in counts.term_ids:
        df += np.bincount(term_ids, minlength=num_vocab)
    idf = np.asarray([math.log(1 + (num_docs - d + 0.5) / (d + 0.5)) for d in df.tolist()], dtype=np.float32)
    indptr = np.zeros(num_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    data = np.empty(int(indptr[-1]), dtype=np.float32)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    next_free = indptr[:-1].copy()  # where each term's next passage goes
    first_doc = 0
    batches = zip(counts.term_ids, counts.counts, counts.num_terms, counts.lengths)
    for term_ids, term_counts, distinct, batch_lengths in batches:
        docs = np.repeat(np.arange(first_doc, first_doc + len(batch_lengths), dtype=np.int32), distinct)
        # as bm25s: the length part (a NumPy float64 per passage) makes the term-frequency part float64, the float32
        # idf multiplies it in float64, and the score is rounded to float32 once, when stored
        length_part = k1 * ((1 - b) + b * batch_lengths.astype(np.float64) / avg_length)
        tf = term_counts.astype(np.float64)
        scores = (idf[term_ids] * (tf / (np.repeat(length_part, distinct) + tf))).astype(np.float32)
        order = np.argsort(term_ids, kind="stable")  # by term, passages in order within a term
        sorted_terms = term_ids[order]
        starts = np.flatnonzero(np.r_[True, sorted_terms[1:] != sorted_terms[:-1]])
        run_lengths = np.diff(np.r_[starts, len(sorted_terms)])
        rank = np.arange(len(sorted_terms)) - np.repeat(starts, run_lengths)
        where = next_free[sorted_terms] + rank
        data[where] = scores[order]
        indices[where] = docs[order]
        next_free[sorted_terms[starts]] += run_lengths
        first_doc += len(batch_lengths)
    return {"data": data, "indices": indices, "indptr": indptr.astype(np.int32), "num_docs": num_docs}


def save_bm25s(folder: str, matrix: dict, vocab: dict[str, int], params: dict) -> None:
    """Write ``folder`` as bm25s saves an index (``bm25s.BM25.load`` reads it): the matrix, the vocabulary (with
    bm25s's empty term, the id after the last, which scores nothing) and the parameters."""
    import bm25s

    bm25 = bm25s.BM25(**params)
    bm25.scores = matrix
    if "" not in vocab:
        vocab[""] = len(vocab)
    bm25.vocab_dict = vocab
    bm25.nonoccurrence_array = None
    os.makedirs(folder, exist_ok=True)
    bm25.save(folder, show_progress=False)
