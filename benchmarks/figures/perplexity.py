"""The perplexity point every perplexity figure is made of: one In-Context RALM evaluation of a reader on one text
with one setting of (L, s, ℓ, retriever), and its CSV columns.

By default a point evaluates the first ``max_eval_tokens`` tokens of the text, as the perplexity tables do (window 0
included, without retrieval). With ``context_tokens`` C > 0 it scores the ``max_eval_tokens`` tokens that follow
the first C instead, each window with a full ``max_length`` L of text before it (:func:`eval_slice`): points that
vary L then score exactly the same tokens, and no point's figure is diluted by a first window without retrieval
(C must be at least the largest L).

    >>> eval_slice(context_tokens=0, max_length=512, num_tokens=2048)
    (0, 2048, 0)
    >>> eval_slice(context_tokens=2048, max_length=512, num_tokens=1024)
    (1536, 3072, 512)
"""

from __future__ import annotations

import sys
import time

from benchmarks.figures import sweep
from benchmarks.bench_setup import READERS
from benchmarks.figures.resources import WHOLE, Resources

SETTINGS = ("model", "data", "dtype", "bos_every_window", "max_eval_tokens", "context_tokens", "max_length", "stride",
            "query_length", "max_doc_tokens", "retriever", "corpus", "index_id")
MEASURES = ("token_ppl", "word_ppl", "nll_sum", "num_tokens", "num_words", "num_windows", "num_retrievals",
            "num_windows_with_passage", "wall_s", "retrieval_s", "scoring_s", "device", "threads", "measured_at")
RETRIEVAL_ONLY = ("query_length", "max_doc_tokens", "corpus")  # settings a run without retrieval has not (None)
MAX_LENGTH = 512  # L of every figure that does not vary it (the tables')


def table(out_dir: str, name: str) -> sweep.Table:
    """The CSV ``<out_dir>/<name>.csv`` of a perplexity figure."""
    import os

    return sweep.Table(os.path.join(out_dir, f"{name}.csv"), SETTINGS, MEASURES)


def main(doc: str, name: str, index_kinds: list[str], add_flags, points, plot, argv=None) -> list[dict]:
    """A perplexity figure script's run (:func:`sweep.main`): the common flags, the index flags of ``index_kinds``,
    the script's own (``add_flags(parser)``), then ``points(resources)`` measured into ``<out-dir>/<name>.csv`` and
    ``plot(rows, png)``."""
    parser = sweep.parser(doc)
    sweep.add_index_flags(parser, index_kinds)
    add_flags(parser)
    args = parser.parse_args(argv)
    res = Resources(args)
    return sweep.main(args, table(args.out_dir, name), lambda: points(res), lambda p: measure(res, p), plot, name)


def eval_slice(context_tokens: int, max_length: int, num_tokens: int) -> tuple[int, int, int]:
    """``(start, end, first)``: evaluate the token ids ``[start, end)`` and count the scored tokens from position
    ``first`` of that slice on, so that the counted tokens are ``[context_tokens, context_tokens + num_tokens)`` of
    the text, each window holding ``max_length`` tokens of text (``context_tokens`` 0: the first ``num_tokens``,
    all of them counted)."""
    if context_tokens == 0:
        return 0, num_tokens, 0
    if context_tokens < max_length:
        raise ValueError(f"context_tokens ({context_tokens}) must be at least max_length ({max_length}) so that every "
                         "counted token has a full window of text before it.")
    return context_tokens - max_length, context_tokens + num_tokens, max_length


def point(res: Resources, model: str, data: str, retriever: str = "bm25", corpus: str | None = WHOLE,
          **settings) -> dict:
    """A point's settings: the tables' (L=512, s=4, ℓ=32 for BM25 / 64 for dense and hybrid, 256-token passages,
    the first --max-eval-tokens tokens, the model's dtype and BOS rule, the whole sample) with ``settings`` changed.
    Settings that a run without retrieval does not use are ``None``."""
    from hf_ralm import RalmConfig, default_query_length

    defaults = RalmConfig()
    p = {"model": model, "data": data, "dtype": res.dtype(model), "bos_every_window": READERS[model].bos_every_window,
         "max_eval_tokens": res.args.max_eval_tokens, "context_tokens": 0, "max_length": MAX_LENGTH,
         "stride": defaults.retrieval_stride, "query_length": default_query_length(retriever),
         "max_doc_tokens": defaults.max_doc_tokens, "retriever": retriever, "corpus": corpus, **settings}
    if retriever == "none":
        p.update(dict.fromkeys(RETRIEVAL_ONLY))
    p["index_id"] = res.index_id(retriever, p["corpus"])
    return p


def points_per_text(res: Resources, variants: list[dict], baseline: bool = True) -> list[dict]:
    """Model by model (so that each loads once), for every evaluation text: the run without retrieval (with
    ``baseline``), then a :func:`point` per variant (the settings it changes)."""
    out = []
    for model in res.args.models:
        for data in res.args.datasets:
            out += [point(res, model, data, retriever="none")] if baseline else []
            out += [point(res, model, data, **variant) for variant in variants]
    return out


def measure(res: Resources, p: dict) -> dict:
    """Evaluate the point: its figures (over the counted tokens, :func:`eval_slice`), counts and times."""
    from hf_ralm import RalmConfig, count_words, evaluate_perplexity, perplexity_figures

    model, tokenizer = res.reader(p["model"], p["dtype"])
    ids = res.ids(p["model"], p["dtype"], p["data"])
    start, end, first = eval_slice(p["context_tokens"], p["max_length"], p["max_eval_tokens"])
    if len(ids) < end:
        raise ValueError(f"{p['data']} has {len(ids)} tokens, fewer than the {end} this point needs: lower "
                         "--max-eval-tokens.")
    ids = ids[start:end]
    # without retrieval there is no passage: any max_doc_tokens the window has room for will do
    doc_tokens = p["max_doc_tokens"] or p["max_length"] - p["stride"]
    config = RalmConfig(retrieval_stride=p["stride"], query_length=p["query_length"], max_length=p["max_length"],
                        max_doc_tokens=doc_tokens, bos_every_window=p["bos_every_window"])
    retriever = res.retriever(p["retriever"], p["corpus"], p["data"])
    t0 = time.perf_counter()
    result = evaluate_perplexity(model, tokenizer, ids, retriever, config, batch_size=res.args.batch_size,
                                 show_progress=sys.stderr.isatty())
    wall = time.perf_counter() - t0
    counted = max(first, 1)  # token 0 is never scored
    figures = perplexity_figures(float(result.token_nlls[counted:].sum()), len(ids) - first, len(ids) - counted,
                                 count_words(tokenizer.decode(ids[first:])))
    return {**figures, **{k: result.figures[k] for k in ("num_windows", "num_retrievals", "num_windows_with_passage")},
            "wall_s": wall, "retrieval_s": result.timings["retrieval_s"], "scoring_s": result.timings["scoring_s"],
            "index_id": res.index_id(p["retriever"], p["corpus"]),  # an index built by this point has its id now
            **sweep.provenance(model)}
