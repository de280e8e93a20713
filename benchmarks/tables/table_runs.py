"""What the results scripts that measure perplexity in-process share (rerank_tables.py, gate_tables.py): the two
readers, the two data sets and their BM25 retrievers, one (reader, data) run's tokens, windows, queries and retrieved
passages, the reader's pass over every window with each of its candidates, the perplexity of a choice per window, and
the caches that make a rerun resume.

Settings: L=512, s=4, ℓ=32, BM25 over the whole Wikipedia sample (each data set's own articles excluded), bfloat16,
Gemma with a BOS in every window (the fair baseline).

Example:
    >>> retrievers = load_retrievers(args)                                                      # doctest: +SKIP
    >>> run = Run("SmolLM2-135M", "WikiText-103 test", args, retrievers, k=16)                 # doctest: +SKIP
    >>> p = reader_pass(run, batch_size=8, config=lm_gate_config(run.config))                  # doctest: +SKIP
    >>> perplexities(p, chosen_nll(p, lambda i, ranking, targets: 0))   # each window's first  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import time

import torch
from benchmarks.bench_setup import BM25_INDEX, CACHE, HELDOUT_DIR, MODELS_DIR, READERS, REPO, eval_sets, load_reader

SETTINGS = dict(retrieval_stride=4, query_length=32, max_length=512)


def add_run_args(parser: argparse.ArgumentParser, out: str) -> None:
    """The flags every results script takes: where passes are cached (``--out``, default ``out`` in hf-ralm's cache),
    the figures' folder, the models, the index, the held-out set, the text length, the batch and the device."""
    parser.add_argument("--out", default=str(CACHE / out), help="cached passes")
    parser.add_argument("--figures-dir", default=str(REPO / "docs" / "figures"))
    parser.add_argument("--models-dir", default=str(MODELS_DIR))
    parser.add_argument("--index-dir", default=str(BM25_INDEX))
    parser.add_argument("--heldout-dir", default=str(HELDOUT_DIR))
    parser.add_argument("--max-eval-tokens", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default=None)


DATA = tuple(eval_sets(HELDOUT_DIR))


def load_retrievers(args) -> dict:
    """One BM25 retriever per data set, its own articles excluded."""
    from hf_ralm.retrieval import BM25Retriever, read_forbidden_titles

    return {data: BM25Retriever.load(args.index_dir, forbidden_titles=read_forbidden_titles(titles))
            for data, (_, titles) in eval_sets(args.heldout_dir).items()}


class Run:
    """One (reader, data): its model, text, windows, queries and ``k`` retrieved passages per window (retrieval is
    cheap and redone), with ``config`` the :data:`SETTINGS` plus ``settings`` (RalmConfig fields)."""

    def __init__(self, reader: str, data: str, args, retrievers: dict, k: int, **settings):
        from hf_ralm import RalmConfig, load_dataset_text, prepare

        self.reader, self.data = reader, data
        self.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model, self.tokenizer = load_reader(args.models_dir, reader, "bfloat16", self.device)
        self.config = RalmConfig(**SETTINGS, bos_every_window=READERS[reader].bos_every_window, **settings)
        data_path, _ = eval_sets(args.heldout_dir)[data]
        self.retriever = retrievers[data]
        self.plan = prepare(load_dataset_text(data_path), self.tokenizer, self.config, self.retriever,
                            max_length=SETTINGS["max_length"], max_eval_tokens=args.max_eval_tokens)
        self.ids, self.windows, self.queries = self.plan.ids, self.plan.windows, self.plan.queries
        self.num_words = self.plan.num_words
        self.candidates = self.plan.candidates(self.windows, k)

    def config_for(self, **settings):
        """The run's config with ``settings`` (RalmConfig fields) changed."""
        from hf_ralm import RalmConfig

        return RalmConfig(**{**self.config.to_dict(), **settings})


def cached(folder: str, run: Run, kind: str, compute) -> dict:
    """What ``compute()`` gives for ``run``, kept as one record in the record store ``folder`` (a rerun reads it back;
    one made with another reader, text or settings is refused)."""
    from hf_ralm import RecordStore, model_identity
    from hf_ralm.retrieval import retriever_identity
    from hf_ralm.utils import provenance

    settings = {"pass": kind, **model_identity(run.model), "data": run.data, "tokens": len(run.ids),
                **run.config.to_dict(), **retriever_identity(run.retriever)}
    with RecordStore(folder, settings, chunk_size=1, reproduce=provenance()) as store:
        if not store.rows():
            store.add(compute())
        return store.rows()[0]


def reader_pass(run: Run, batch_size: int, config=None) -> dict:
    """Every candidate's (and, with ``rerank_allow_no_passage``, no passage's) ranking and target NLL sums per window
    (``rerank_windows`` under ``config``, by default the run's), the NLL of the windows nothing was ranked for
    (``base_nll``) and the pass's time."""
    from hf_ralm.selection import rerank_windows

    config = config or run.config
    t0 = time.perf_counter()
    outcome = rerank_windows(run.model, run.tokenizer, run.ids, run.windows, run.queries, candidates=run.candidates,
                             config=config,
                             batch_size=batch_size)
    seconds = time.perf_counter() - t0
    unranked = [w for w in run.windows if outcome.target_nlls[w.index] is None]
    base = sum(float(outcome.token_nlls[w.score_begin : w.end].sum()) for w in unranked)
    return {"seconds": seconds, "base_nll": base, "ranking": outcome.ranking_nlls, "targets": outcome.target_nlls,
            "num_tokens": len(run.ids), "num_words": run.num_words, "num_windows": len(run.windows)}


def chosen_units(p: dict, pick) -> list[float]:
    """The NLL sums of a reader pass's units when each ranked window ``i`` puts candidate ``pick(i, ranking sums,
    target sums)`` in context: first the windows nothing was ranked for, together (``base_nll``), then each ranked
    window in order (what a paired interval resamples in blocks)."""
    return [p["base_nll"], *(t[pick(i, r, t)] for i, (r, t) in enumerate(zip(p["ranking"], p["targets"]))
                             if t is not None)]


def chosen_nll(p: dict, pick) -> float:
    """The summed NLL of the text when each ranked window ``i`` puts candidate ``pick(i, ranking sums, target sums)``
    in context: a reader pass's NLL sums, added up."""
    units = chosen_units(p, pick)
    return units[0] + sum(units[1:])


def perplexities(p: dict, nll: float) -> dict:
    """Token and word perplexity of a summed NLL over the pass's text (the paper's counts)."""
    return {"token_ppl": float(torch.tensor(nll / p["num_tokens"]).exp()),
            "word_ppl": float(torch.tensor(nll / p["num_words"]).exp())}
