"""Training data of the predictive reranker (Ram et al. 2023, §6.2), collected with the frozen reader.

For each training article (``{"id", "title", "text"}``, in the given order):

1. its tokens are cut into the evaluation windows of the config (stride ``s``, window length ``L``), exactly as
   evaluation cuts a text (:func:`~hf_ralm.windows.plan_windows`);
2. up to ``windows_per_article`` windows after window 0 are kept, spread evenly over the article
   (:func:`spread_windows`);
3. each kept window's query (the last ``ℓ`` tokens before its first scored token) retrieves ``k``
   (``rerank_candidates``) passages, the article's own passages excluded (:func:`retrieve_excluding_title`: a
   passage of the same article would hold the very text to predict);
4. the reader scores the window's next stride ``y`` under every candidate ``d_i``: the oracle's computation,
   :func:`~hf_ralm.reranking.lm.rerank_windows` with ``rerank="oracle"``, whose target NLL sums are
   ``-log p(y | [d_i; x])``;
5. the window becomes one row: ``prefix`` (the decoded query: what the cross-encoder reads at use time, as
   ``rerank="predictive"`` gives it), ``candidates`` (``title\\ntext`` as put in context), ``retrieval_scores``,
   ``target_logprobs``, ``article`` (the title) and ``window`` (its index).

Rows go to a :class:`~hf_ralm.reranking.data.RerankDataWriter` folder in chunks. A rerun with the same settings
resumes after the last saved row, found by its article title and window without recomputing anything (titles
identify articles: an untitled article, or one whose title came before, is skipped); a rerun with other settings is
refused, naming the setting, unless ``overwrite``.

Example::

    from hf_ralm import RetrievalAugmentedModel
    from hf_ralm.reranking import collect_rerank_data, training_articles

    model = RetrievalAugmentedModel.from_pretrained("HuggingFaceTB/SmolLM2-135M", retriever="bm25",
                                                    corpus="wiki.jsonl.gz", max_length=512, rerank_candidates=16)
    articles = training_articles("wiki.jsonl.gz", exclude_titles=eval_titles, num_articles=1000)
    collect_rerank_data(model.language_model, model.tokenizer, model.retriever, articles, model.config,
                        "data/rerank", windows_per_article=8, metadata={"articles": "wiki.jsonl.gz"})
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

from ..configuration_ralm import RALM_FIELDS, RalmConfig
from ..model_inputs import window_length
from ..retrieval.base import Passage, Retriever
from ..retrieval.corpus import read_corpus
from ..resume import titles_fingerprint
from ..retrieval.index_folder import read_index_info
from ..windows import check_count, plan_windows
from .data import RerankDataWriter, load_rerank_data
from .lm import rerank_windows

logger = logging.getLogger(__name__)


def collect_rerank_data(
    model,
    tokenizer,
    retriever,
    articles: Iterable[Mapping[str, str]],
    config: RalmConfig,
    output_dir: str | os.PathLike,
    *,
    windows_per_article: int = 8,
    max_windows: int | None = None,
    chunk_size: int = 1000,
    overwrite: bool = False,
    batch_size: int = 8,
    metadata: Mapping[str, Any] | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Write the predictive reranker's training data for ``articles`` to ``output_dir`` (see the module docstring).

    ``config`` gives the RALM settings (``retrieval_stride``, ``max_length``, ``query_length``, ``max_doc_tokens``,
    ``bos_every_window``, ``passage_template``, ``rerank_candidates`` as ``k``, ``rerank_tokens``); its reranking
    strategy is not used: every candidate is scored. Collection stops after ``max_windows`` rows in the folder
    (resumed ones included; ``None``: all articles). ``batch_size`` counts the reader's inputs (one per candidate) per
    forward pass. ``metadata`` adds settings the rows depend on that this function cannot see, above all where the
    articles came from (e.g. ``{"articles": "wiki.jsonl.gz", "num_articles": 1000}``); they are recorded with the
    reader, ``k``, ``stride``, ``query_length``, ``rerank_tokens``, ``max_length``, ``max_doc_tokens``, the corpus
    and ``windows_per_article`` (``rerank_data.json``).

    Returns ``output_dir``, ``rows_written`` (this run), ``rows_resumed`` (found in the folder), ``rows_total``,
    ``articles_read`` (this run), ``seconds`` and ``windows_per_s``.

    Example::

        summary = collect_rerank_data(reader, tokenizer, retriever, articles, config, "data/rerank", max_windows=20)
        summary["rows_total"]  # 20, or fewer when the articles run out
    """
    from ..evaluation import tokenize_text, window_queries  # evaluation imports this package: imported here

    check_count("windows_per_article", windows_per_article)
    check_count("batch_size", batch_size)
    if max_windows is not None:
        check_count("max_windows", max_windows)
    oracle = RalmConfig(**{**{name: getattr(config, name) for name in RALM_FIELDS}, "rerank": "oracle",
                           "reranker_model": None, "rerank_allow_no_passage": False,
                           "rerank_no_passage_margin": 0.0})
    max_length = window_length(model, config)
    query_length = config.query_length_for(retriever)
    settings = {
        "reader": model.config.name_or_path or type(model).__name__,
        "dtype": str(model.dtype).removeprefix("torch."),
        "k": config.rerank_candidates,
        "stride": config.retrieval_stride,
        "query_length": query_length,
        "rerank_tokens": config.rerank_tokens,
        "max_length": max_length,
        "max_doc_tokens": config.max_doc_tokens,
        "bos_every_window": config.bos_every_window,
        "passage_template": config.passage_template,
        **_retriever_metadata(retriever),
        "windows_per_article": windows_per_article,
        **(metadata or {}),
    }

    def article_rows(article: Mapping[str, str], first_window: int, limit: int | None) -> list[dict[str, Any]]:
        """The rows of the article's kept windows from ``first_window`` on (at most ``limit``)."""
        ids = tokenize_text(tokenizer, article["text"]) if article["text"] else []
        if len(ids) <= max_length:  # window 0 holds it all: no window with retrieval
            return []
        windows = plan_windows(len(ids), max_length, config.retrieval_stride)
        kept = [windows[i] for i in spread_windows(len(windows), windows_per_article) if i >= first_window]
        queries = window_queries(tokenizer, ids, kept, query_length)
        found = retrieve_excluding_title(retriever, queries, config.rerank_candidates, article["title"])
        todo = [(w, query, pool) for w, query, pool in zip(kept, queries, found) if pool][:limit]
        if not todo:
            return []
        pools: list[list[Passage]] = [[] for _ in windows]
        for w, _, pool in todo:
            pools[w.index] = pool
        # The spread windows rarely share a passage, and sharing its keys/values would run their inputs one by one.
        outcome = rerank_windows(model, tokenizer, ids, [w for w, _, _ in todo], [None] * len(windows), pools, oracle,
                                 batch_size=batch_size, reuse_prefix_kv=False, show_progress=False)
        return [{"prefix": query, "candidates": [config.passage_text(p.title, p.text) for p in pool],
                 "retrieval_scores": [p.score for p in pool], "target_logprobs": [-nll for nll in nlls],
                 "article": article["title"], "window": w.index}
                for (w, query, pool), nlls in zip(todo, outcome.target_nlls)]

    t0 = time.perf_counter()
    articles_read = 0
    with RerankDataWriter(output_dir, settings, chunk_size=chunk_size, overwrite=overwrite) as writer:
        resumed = total = writer.num_done
        resume_after = _last_saved_row(output_dir) if resumed else None
        progress = tqdm(total=max_windows, initial=resumed, desc="Collecting rerank data", unit="win",
                        disable=not show_progress)
        with progress:
            for article in _titled_once(articles):
                if max_windows is not None and total >= max_windows:
                    break
                first_window = 1
                if resume_after is not None:  # the saved rows end inside or after this article
                    if article["title"] != resume_after[0]:
                        continue
                    first_window, resume_after = resume_after[1] + 1, None
                rows = article_rows(article, first_window, None if max_windows is None else max_windows - total)
                articles_read += 1
                writer.add(rows)
                total += len(rows)
                progress.update(len(rows))
    if resume_after is not None and not (max_windows is not None and total >= max_windows):
        raise ValueError(
            f"{output_dir} holds rows up to article {resume_after[0]!r} (window {resume_after[1]}), which is not among "
            "the given articles: resume with the same articles in the same order, or pass overwrite=True."
        )
    seconds = time.perf_counter() - t0
    return {"output_dir": str(output_dir), "rows_written": total - resumed, "rows_resumed": resumed,
            "rows_total": total, "articles_read": articles_read, "seconds": seconds,
            "windows_per_s": (total - resumed) / seconds if seconds else 0.0}


def spread_windows(num_windows: int, count: int) -> list[int]:
    """Indices of up to ``count`` of the windows ``1 .. num_windows - 1`` (window 0 has no retrieval), spread evenly:
    the middle window of each of ``count`` equal parts; all of them when there are no more than ``count``.

    Example:
        >>> spread_windows(101, 4), spread_windows(4, 8)
        ([13, 38, 63, 88], [1, 2, 3])
    """
    candidates = num_windows - 1
    if candidates <= count:
        return list(range(1, num_windows))
    return [1 + (2 * i + 1) * candidates // (2 * count) for i in range(count)]


def retrieve_excluding_title(retriever, queries: Sequence[str], k: int, title: str) -> list[list[Passage]]:
    """Per query, the top-``k`` passages whose title is not ``title``, exactly: retrieval goes deeper (twice ``k``,
    then doubling) for the queries whose top passages are too often of that title, until ``k`` others are found or
    the retriever returns fewer passages than asked (it has no more).

    Example::

        retrieve_excluding_title(retriever, ["the emperor of rome"], k=2, title="Rome")  # no passage of "Rome"
    """
    results: list[list[Passage]] = [[] for _ in queries]
    todo, depth = list(range(len(queries))), 2 * k
    while todo:
        short = []
        for i, found in zip(todo, retriever.retrieve([queries[i] for i in todo], k=depth)):
            others = [p for p in found if p.title != title]
            if len(others) >= k or len(found) < depth:
                results[i] = others[:k]
            else:
                short.append(i)
        todo, depth = short, 2 * depth
    return results


def training_articles(
    path: str | os.PathLike, *, exclude_titles: Iterable[str] = (), num_articles: int | None = None
) -> Iterator[dict]:
    """The articles of a corpus file (JSONL(.gz) rows with ``id``, ``title``, ``text``, or a DPR TSV), in file order,
    leaving out those whose title is in ``exclude_titles`` (e.g. the evaluation articles and WikiText-103's titles);
    the first ``num_articles`` of the rest (all when ``None``).

    Example::

        articles = training_articles("wiki.jsonl.gz", exclude_titles={"Nero"}, num_articles=500)
    """
    if num_articles is not None:
        check_count("num_articles", num_articles)
    excluded = frozenset(exclude_titles)
    kept = (article for article in read_corpus(str(path)) if article["title"] not in excluded)
    return itertools.islice(kept, num_articles)


def _retriever_metadata(retriever) -> dict[str, Any]:
    """What identifies the candidates' source: the retriever kind, its index folder, what that index records about
    itself (corpus fingerprint, scoring, text analysis: an index rebuilt with another analysis ranks other passages,
    so rows from the two must not mix) and its forbidden titles."""
    if not isinstance(retriever, Retriever):
        return {"retriever": type(retriever).__name__, "corpus": None}
    recorded = read_index_info(retriever.index_dir) or {}
    return {"retriever": retriever.name, "corpus": os.path.abspath(retriever.index_dir),
            # not its file sizes or corpus paths: the same index, copied or moved, holds the same passages
            "index": {key: value for key, value in recorded.items() if key not in ("files", "corpus")},
            "forbidden_titles": titles_fingerprint(retriever.forbidden_titles)}


def _titled_once(articles: Iterable[Mapping[str, str]]) -> Iterator[Mapping[str, str]]:
    """The articles with a title not seen before: titles identify articles (own passages, resuming)."""
    seen: set[str] = set()
    for article in articles:
        title = article.get("title") or ""
        if not title or title in seen:
            logger.warning("Skipping an article %s: titles identify the articles of rerank data.",
                           f"whose title {title!r} came before" if title else "without a title")
            continue
        seen.add(title)
        yield article


def _last_saved_row(folder: str | os.PathLike) -> tuple[str, int]:
    """The article title and window of the last row saved in a rerank data folder."""
    dataset, _ = load_rerank_data(folder)
    last = dataset.select_columns(["article", "window"])[dataset.num_rows - 1]
    return last["article"], last["window"]
