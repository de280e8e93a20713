"""A BM25 index built with bounded memory: the passages' term counts go to disk as they are counted, and the score
matrix is written from them a range of terms at a time, so that memory holds the vocabulary and one range's postings,
whatever the corpus's size (as Lucene writes segments and merges them on disk).

bm25s builds its index from every passage's tokens held as Python lists (about 3.8 GB for the 666k passages of the
Wikipedia sample, some 120 GB projected for the paper's 21M). Here the passages stream through once (``count_terms``):
each passage's analysed terms become the ids of its distinct terms and their counts, a batch of ``BATCH_DOCS`` passages
at a time, appended to files in a spill folder (``SpilledCounts``: 4 bytes per term id, 2 per count, 8 per passage), and
only the vocabulary (term → id: a Python dict, about 120 bytes a term, 110 MB for the 987k terms of 2M passages) and
each term's document frequency stay in memory. Then ``save_bm25s`` writes bm25s's score matrix (CSC: one column per
term, its passages in order) as the ``.npy`` files bm25s loads, a range of terms per pass over the spilled counts: each
pass holds that range's scores and passage ids (8 bytes a posting, at most ``memory_budget`` bytes unless one term alone
has more) and writes them after the previous range's, so the files grow front to back and nothing is written twice. The
scores are bm25s's own arithmetic (Lucene's idf, Robertson's term-frequency part, float64 rounded to float32), so they
are bm25s's to the bit, and the files are the same bytes whatever the budget or the batches. Term ids are numbered by
first appearance (bm25s numbers them in a set's order, which changes from run to run; retrieval does not depend on it).

Examples:
    >>> import tempfile
    >>> counts = count_terms([["rome", "emperor", "rome"], ["sea", "sailor"], ["rome"]], tempfile.mkdtemp())
    >>> counts.vocab, counts.num_docs, counts.df.tolist()   # "rome" is in passages 0 and 2
    ({'rome': 0, 'emperor': 1, 'sea': 2, 'sailor': 3}, 3, [2, 1, 1, 1])
    >>> [passages.tolist() for _, passages, _ in term_postings(counts, 0.9, 0.4, memory_budget=16)]
    [[0, 2], [0, 1], [1]]
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Iterator

import numpy as np

from ..errors import CorpusError

BATCH_DOCS = 10_000  # passages whose counts become one batch of arrays (and are scored together)
MEMORY_BUDGET = 2 * 2**30
"""Bytes of postings (a float32 score and an int32 passage id each) one pass of ``save_bm25s`` holds: 2 GiB, so that a
build of the paper's 21M passages (some 1.2G postings) takes about five passes and stays well within a machine of 8
GB."""
POSTING_BYTES = 8
_FILES = ("term_ids", "counts", "num_terms", "lengths")  # the spill files, one per array of a batch


@dataclass
class SpilledCounts:
    """Per passage, its distinct terms' ids and counts, in passage order, in batches written to files under ``folder``
    (``term_ids``, ``counts``, ``num_terms``: how many distinct terms each passage has, ``lengths``: each passage's
    number of terms, repeats counted); in memory only the vocabulary, the document frequencies, the passages' total
    length and each batch's sizes. ``batches`` reads them back in order; ``remove`` deletes the files.

    Attributes:
        folder: the spill folder.
        vocab: term → id.
        df: each term's number of passages.
        total_length: the passages' total number of terms.
        sizes: per batch, its passages, its (passage, term) pairs and the dtype of its counts.
    """

    folder: str
    vocab: dict[str, int] = field(default_factory=dict)
    df: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    total_length: int = 0
    # per batch: its passages, its (passage, term) pairs and the dtype of its counts (uint16, or uint32 where a
    # passage repeats a term 65,536 times or more: a whole book as one row)
    sizes: list[tuple[int, int, type]] = field(default_factory=list)

    @property
    def num_docs(self) -> int:
        return sum(docs for docs, _, _ in self.sizes)

    @property
    def num_pairs(self) -> int:
        return sum(pairs for _, pairs, _ in self.sizes)

    def batches(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Each batch's ``(term_ids, counts, num_terms, lengths)``, read from the files in order (plain reads, not
        memory maps, so that what was read does not stay in this process's resident memory)."""
        files = [open(os.path.join(self.folder, name), "rb") for name in _FILES]
        try:
            for docs, pairs, count_dtype in self.sizes:
                yield tuple(np.fromfile(f, dtype=dtype, count=n) for f, dtype, n in zip(
                    files, (np.int32, count_dtype, np.int32, np.int32), (pairs, pairs, docs, docs)))
        finally:
            for f in files:
                f.close()

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def count_terms(analysed: Iterable[list[str]], folder: str, batch_docs: int | None = None) -> SpilledCounts:
    """The ``SpilledCounts`` of passages given as their analysed terms (read once, one at a time).

    Args:
        analysed: per passage, its analysed terms.
        folder: the (new or empty) spill folder the counts are written to.
        batch_docs: the passages of a batch (``None``: ``BATCH_DOCS``).

    Returns:
        The counts.
    """
    batch_docs = batch_docs or BATCH_DOCS
    os.makedirs(folder, exist_ok=True)
    counts = SpilledCounts(folder)
    vocab = _Vocabulary()
    df = np.zeros(1024, dtype=np.int64)
    ids: list[int] = []
    lengths: list[int] = []
    files = [open(os.path.join(folder, name), "wb") for name in _FILES]

    def close_batch() -> None:
        nonlocal df
        # each (passage, term id) pair as one int64 key, passage in the high half: np.unique sorts the keys, so each
        # passage's distinct terms come out together, passage after passage, ids ascending within a passage
        docs = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        keys, repeats = np.unique((docs << 32) | np.asarray(ids, dtype=np.int64), return_counts=True)
        term_ids = (keys & 0xFFFFFFFF).astype(np.int32)
        count_dtype = np.uint16 if repeats.size == 0 or repeats.max() < 2**16 else np.uint32
        batch_lengths = np.asarray(lengths, dtype=np.int32)
        arrays = (term_ids, repeats.astype(count_dtype),
                  np.bincount(keys >> 32, minlength=len(lengths)).astype(np.int32), batch_lengths)
        for f, array in zip(files, arrays):
            array.tofile(f)
        if len(vocab) > len(df):  # room for the new terms' frequencies
            df = np.concatenate([df, np.zeros(max(len(vocab), 2 * len(df)) - len(df), dtype=np.int64)])
        np.add.at(df, term_ids, 1)  # a term's ids are distinct within a passage: one per passage holding it
        counts.sizes.append((len(lengths), len(term_ids), count_dtype))
        counts.total_length += int(batch_lengths.sum(dtype=np.int64))
        ids.clear()
        lengths.clear()

    try:
        for terms in analysed:
            ids.extend(map(vocab.__getitem__, terms))  # a new term gets the next id (_Vocabulary.__missing__)
            lengths.append(len(terms))
            if len(lengths) == batch_docs:
                close_batch()
        if lengths:
            close_batch()
    finally:
        for f in files:
            f.close()
    counts.vocab = dict(vocab)  # a plain dict: looking up a term not in it must not add it
    counts.df = df[:len(vocab)].copy()
    return counts


class _Vocabulary(dict):
    """term -> id, numbered by first appearance: a term not yet seen gets the next id when looked up."""

    def __missing__(self, term: str) -> int:
        term_id = self[term] = len(self)
        return term_id


def column_starts(counts: SpilledCounts) -> np.ndarray:
    """The CSC matrix's ``indptr`` (int64): where each term's postings start, one column per term of the
    vocabulary, and the number of postings last."""
    indptr = np.zeros(len(counts.df) + 1, dtype=np.int64)
    np.cumsum(counts.df, out=indptr[1:])
    return indptr


def term_postings(counts: SpilledCounts, k1: float, b: float, memory_budget: int = MEMORY_BUDGET
                  ) -> Iterator[tuple[np.ndarray, np.ndarray, range]]:
    """bm25s's score matrix of ``counts`` for Lucene's BM25 (``method="lucene"``), a range of terms at a time. A term's
    score in a passage is ``idf · tf / (tf + k1 · (1 - b + b · dl / avgdl))`` with
    ``idf = log(1 + (N - df + 0.5) / (df + 0.5))``, computed as bm25s computes it.

    Args:
        counts: the spilled counts.
        k1: BM25's term-frequency saturation.
        b: BM25's length normalisation.
        memory_budget: the bytes of postings a range holds at most, unless one term alone has more.

    Yields:
        ``(data, indices, terms)``: the float32 scores and int32 passage ids of the postings of the terms ``terms`` (a
            ``range``; term after term, passages in order within a term).
    """
    num_docs = counts.num_docs
    # as bm25s: the float64 mean of the passages' lengths (the sum of integers is exact in float64 below 2**53)
    avg_length = np.float64(counts.total_length) / num_docs if num_docs else 0.0
    idf = np.asarray([math.log(1 + (num_docs - d + 0.5) / (d + 0.5)) for d in counts.df.tolist()], dtype=np.float32)
    indptr = column_starts(counts)
    per_pass = max(1, memory_budget // POSTING_BYTES)
    first_term = 0
    while first_term < len(idf):
        # the terms whose postings fit in the budget, and at least one
        end_term = max(first_term + 1, int(np.searchsorted(indptr, indptr[first_term] + per_pass, side="right")) - 1)
        yield (*_range_postings(counts, k1, b, idf, avg_length, indptr[first_term:end_term + 1], first_term),
               range(first_term, end_term))
        first_term = end_term


def _range_postings(counts: SpilledCounts, k1: float, b: float, idf: np.ndarray, avg_length: float,
                    indptr: np.ndarray, first_term: int) -> tuple[np.ndarray, np.ndarray]:
    """The scores and passage ids of the terms from ``first_term`` whose column starts are ``indptr``: one pass over
    the spilled counts."""
    end_term = first_term + len(indptr) - 1
    data = np.empty(int(indptr[-1] - indptr[0]), dtype=np.float32)
    indices = np.empty(len(data), dtype=np.int32)
    next_free = indptr[:-1] - indptr[0]  # where each term's next passage goes, in this range's arrays
    first_doc = 0
    for term_ids, term_counts, distinct, batch_lengths in counts.batches():
        docs = np.repeat(np.arange(first_doc, first_doc + len(batch_lengths), dtype=np.int32), distinct)
        first_doc += len(batch_lengths)
        # as bm25s: the length part (a NumPy float64 per passage) makes the term-frequency part float64, the float32
        # idf multiplies it in float64, and the score is rounded to float32 once, when stored
        length_part = np.repeat(k1 * ((1 - b) + b * batch_lengths.astype(np.float64) / avg_length), distinct)
        if first_term > 0 or end_term < len(idf):  # keep this range's pairs
            kept = (term_ids >= first_term) & (term_ids < end_term)
            term_ids, term_counts, docs, length_part = (a[kept] for a in (term_ids, term_counts, docs, length_part))
        if not len(term_ids):  # no posting of these terms in this batch
            continue
        tf = term_counts.astype(np.float64)
        scores = (idf[term_ids] * (tf / (length_part + tf))).astype(np.float32)
        order = np.argsort(term_ids, kind="stable")  # by term, passages in order within a term
        sorted_terms = term_ids[order] - first_term
        starts = np.flatnonzero(np.r_[True, sorted_terms[1:] != sorted_terms[:-1]])
        run_lengths = np.diff(np.r_[starts, len(sorted_terms)])
        rank = np.arange(len(sorted_terms)) - np.repeat(starts, run_lengths)
        where = next_free[sorted_terms] + rank
        data[where] = scores[order]
        indices[where] = docs[order]
        next_free[sorted_terms[starts]] += run_lengths
    return data, indices


def save_bm25s(folder: str, counts: SpilledCounts, params: dict, memory_budget: int = MEMORY_BUDGET) -> None:
    """Write ``folder`` as bm25s saves an index (``bm25s.BM25.load`` reads it): the matrix (``term_postings``, its data
    and indices written range after range), the vocabulary (with bm25s's empty term, the id after the last, which scores
    nothing) and the parameters.

    Args:
        folder: the folder to write.
        counts: the spilled counts.
        params: bm25s's parameters (``method``, ``k1``, ``b``).
        memory_budget: the bytes of postings a pass holds at most.

    Raises:
        CorpusError: the corpus has 2**31 (passage, term) pairs or more, more than bm25s's int32 column starts hold.
    """
    import bm25s

    indptr = column_starts(counts)
    if indptr[-1] >= 2**31:
        raise CorpusError(f"The corpus has {int(indptr[-1]):,} (passage, term) pairs, more than the 2**31 that "
                          "bm25s's int32 column starts hold: split it into corpora of fewer passages.")
    bm25 = bm25s.BM25(**params)
    # bm25s writes everything but the postings, which are written next, over its empty arrays
    bm25.scores = {"data": np.zeros(0, dtype=np.float32), "indices": np.zeros(0, dtype=np.int32),
                   "indptr": indptr.astype(np.int32), "num_docs": counts.num_docs}
    vocab = counts.vocab
    if "" not in vocab:
        vocab[""] = len(vocab)
    bm25.vocab_dict = vocab
    bm25.nonoccurrence_array = None
    os.makedirs(folder, exist_ok=True)
    bm25.save(folder, show_progress=False)
    with open(os.path.join(folder, "data.csc.index.npy"), "wb") as data_file, \
            open(os.path.join(folder, "indices.csc.index.npy"), "wb") as indices_file:
        _npy_header(data_file, np.float32, int(indptr[-1]))
        _npy_header(indices_file, np.int32, int(indptr[-1]))
        for data, indices, _ in term_postings(counts, params["k1"], params["b"], memory_budget):
            data.tofile(data_file)
            indices.tofile(indices_file)


def _npy_header(f: BinaryIO, dtype: type, length: int) -> None:
    """The header ``np.save`` writes for a one-dimensional array of ``length`` items of ``dtype``."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros(0, dtype=dtype))
    np.lib.format.write_array_header_1_0(f, {**header, "shape": (length,)})
