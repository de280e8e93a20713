"""Training data of the predictive reranker (Ram et al. 2023, §6.2), collected with the frozen reader.

For each training article (``{"id", "title", "text"}``, in the given order):

1. its tokens are cut into the evaluation windows of the config (stride ``s``, window length ``L``), exactly as
   evaluation cuts a text ([`plan_windows`][hf_ralm.plan_windows]);
2. up to ``windows_per_article`` windows after window 0 are kept, spread evenly over the article
   (``spread_windows``);
3. each kept window's query (the last ``ℓ`` tokens before its first scored token) retrieves ``k``
   (``rerank_candidates``) passages, the article's own passages excluded (``retrieve_excluding_title``: a
   passage of the same article would hold the very text to predict);
4. the reader scores each kept window with every candidate ``d_i`` in context and with none (one batched pass,
   ``hf_ralm.selection.rerank.rerank_windows`` with the no-passage candidate): the NLL of its last ``s'`` prefix
   tokens (zero-shot ranking) and of its next stride ``y`` (``-log p(y | [d_i; x])``, what the oracle ranks on and
   the predictive reranker learns);
5. the window becomes one compact record (``hf_ralm.reranker_training.data``): the article's corpus id, the
   window, its query's token positions, the candidates' ids and retrieval scores, and the two NLL lists (no passage
   last).

Records go to a ``RerankDataWriter`` folder in gzip'd chunks. Its settings record
what the records depend on by fingerprint (the articles file, the index's corpus, the excluded titles), never by path,
so a copy of the folder (e.g. committed to a repository) resumes anywhere; ``reproduce`` records the command, the code's
commit and the paths. The kept windows of all articles, in order, are the run's one plan: record ``n`` is its ``n``-th
window, and chunk ``c`` holds records ``[c * chunk_size, (c + 1) * chunk_size)``. A rerun with the same settings
computes only the windows no chunk holds (the saved records are checked to be the same articles' windows: ids and titles
identify articles, so an article without a title, or whose id or title came before, is skipped); a rerun with other
settings is refused, naming the setting, unless ``overwrite``, and a damaged chunk by its name, unless ``repair`` (moved
aside and computed again). Many workers share a run (``num_shards`` and ``shard_id``, or the environment of torchrun,
accelerate or a Slurm array: ``hf_ralm.runs.shards.Shard``): each walks the plan (tokenizing and retrieving,
which is cheap beside the reader) and worker I scores chunks I, I + N, ...; together their chunks are one training set,
the same as one process writes.

Examples:
    ```python
    from hf_ralm import RetrievalAugmentedModel, RunOptions
    from hf_ralm.reranker_training import collect_rerank_data, training_articles

    model = RetrievalAugmentedModel.from_pretrained("HuggingFaceTB/SmolLM2-135M", retriever="bm25",
                                                    corpus="wiki.jsonl.gz", max_length=512, rerank_candidates=16)
    articles = training_articles("wiki.jsonl.gz", exclude_titles=eval_titles, num_articles=1000)
    collect_rerank_data(model.language_model, model.tokenizer, model.retriever, articles, model.config,
                        output_dir="data/rerank", windows_per_article=8, run=RunOptions(batch_size=16, chunk_size=128))
    ```
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from transformers.utils import logging

from ..config.configuration_ralm import RalmConfig
from ..config.settings import RALM_FIELDS
from ..errors import SettingError
from ..core.batching import BatchSize
from ..core.modeling_utils import model_device, model_path
from ..core.passages import Passage
from ..core.identity import run_identity
from ..core.plan import WindowPlan, prepare, window_length
from ..retrieval.base import retriever_identity
from ..retrieval.corpus import read_corpus
from ..retrieval.local import LocalIndexRetriever
from ..runs.harness import ChunkRun, RunOptions
from ..selection.rerank import rerank_windows
from ..utils.checks import check_count
from ..utils.reproduction import provenance
from ..core.windows import Window, query_span
from .data import RerankDataWriter
from .defaults import CHUNK_SIZE, WINDOWS_PER_ARTICLE

logger = logging.get_logger(__name__)


def collect_rerank_data(
    model,
    tokenizer,
    retriever,
    articles: Iterable[Mapping[str, str]],
    config: RalmConfig,
    *,
    output_dir: str | os.PathLike,
    windows_per_article: int = WINDOWS_PER_ARTICLE,
    max_windows: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    reproduce: Mapping[str, Any] | None = None,
    run: RunOptions = RunOptions(),
) -> dict[str, Any]:
    """Write the predictive reranker's training data for ``articles`` to ``output_dir`` (see the module docstring).

    The folder's settings are the run's identity (``hf_ralm.core.identity.run_identity``: the reader, every RALM
    setting of the scoring pass under its own name, ``query_length`` as used, and the window length), the index's
    identity, ``windows_per_article`` and ``metadata``; its ``reproduce`` the command, git commit, reader and index
    paths and ``reproduce`` (``rerank_data.json``).

    Args:
        model: the frozen reader.
        tokenizer: its tokenizer.
        retriever: what retrieves the candidates.
        articles: the training articles (``{"id", "title", "text"}``, in order; ``training_articles`` reads them).
        config: the RALM settings (``retrieval_stride``, ``max_length``, ``query_length``, ``max_doc_tokens``,
            ``bos_every_window``, ``passage_template``, ``rerank_candidates`` as ``k``, ``rerank_tokens`` as ``s'``);
            its reranking strategy is not used: every candidate is scored.
        output_dir: the data folder.
        windows_per_article: the windows kept per article, spread evenly over it.
        max_windows: collection stops after this many windows (resumed ones included; ``None``: all articles).
        metadata: settings the records depend on that this function cannot see, above all which articles they come
            from (e.g. ``{"articles_fingerprint": file_fingerprint(path), "num_articles": 1000}``:
            ``load_rerank_data`` checks that fingerprint).
        reproduce: what reruns it (e.g. ``{"articles": path}``, which ``load_rerank_data`` reads the texts from).
        run: how the run is kept ([`RunOptions`][hf_ralm.RunOptions]; its ``output_dir`` is ``output_dir``):
            ``run.chunk_size`` windows a chunk (``CHUNK_SIZE`` when ``None``), ``run.overwrite``, ``run.repair``,
            progress; ``run.batch_size`` counts the reader's inputs (one per candidate) per forward pass (``"auto"``:
            [`BatchSize`][hf_ralm.BatchSize]); ``run.num_shards``/``run.shard_id`` make this one of many workers
            (see the module docstring).

    Returns:
        ``output_dir``, ``rows_written`` (this run), ``rows_resumed`` (found in the folder), ``rows_total`` (in the
            folder now), ``complete`` (every window of the plan is in), ``articles_read`` (this run), ``seconds``,
            ``windows_per_s`` and, sharded, ``shard``.

    Raises:
        SettingError: ``run.output_dir`` is another folder than ``output_dir``, or a count is below 1.
        ValueError: the folder holds records of other articles, or more windows than the articles make.

    Examples:
        ```python
        summary = collect_rerank_data(reader, tokenizer, retriever, articles, config, output_dir="data/rerank",
                                      max_windows=20, run=RunOptions(overwrite=True))
        summary["rows_total"]  # 20, or fewer when the articles run out
        ```
    """
    check_count("windows_per_article", windows_per_article)
    if run.output_dir is not None and os.fspath(run.output_dir) != os.fspath(output_dir):
        raise SettingError(f"rerank data goes to output_dir ({output_dir}), but run.output_dir is "
                           f"{run.output_dir}: give the folder once, as output_dir.")
    batches = BatchSize(run.batch_size, model_device(model))
    if max_windows is not None:
        check_count("max_windows", max_windows)
    # The reader ranks every candidate and no passage: one pass gives the ranking and the target NLLs of each.
    # (the query length is the plan's, the retriever's default when not set: recorded with the data as it was used)
    scoring = RalmConfig(**{**{name: getattr(config, name) for name in RALM_FIELDS}, "rerank": "lm",
                            "reranker_model": None, "rerank_allow_no_passage": True,
                            "rerank_no_passage_margin": 0.0, "query_length": config.query_length_for(retriever)})
    max_length = window_length(model, config, retrieving=True)
    settings = run_identity(model, scoring, window_length=max_length, **retriever_identity(retriever),
                            windows_per_article=windows_per_article, **(metadata or {}))
    rerun = {**provenance(), "reader_path": model_path(model),
             "index_dir": os.path.abspath(retriever.index_dir) if isinstance(retriever, LocalIndexRetriever) else None,
             **(reproduce or {})}

    def article_windows(article: Mapping[str, str], limit: int | None) -> list[_Kept]:
        """The article's kept windows that have candidates (at most ``limit``)."""
        if not article["text"]:
            return []
        plan = prepare(article["text"], tokenizer, config, retriever, max_length=max_length)
        if len(plan.windows) == 1:  # window 0 holds it all: no window with retrieval
            return []
        kept = [plan.windows[i] for i in spread_windows(len(plan.windows), windows_per_article)]
        found = retrieve_excluding_title(retriever, [plan.queries[w.index] for w in kept], config.rerank_candidates,
                                         article["title"])
        return [_Kept(article["id"], plan, w, pool) for w, pool in zip(kept, found) if pool][:limit]

    def records(items: Sequence[_Kept]) -> list[dict[str, Any]]:
        """The records of ``items``: the reader scores each article's windows in one call."""
        rows = []
        for _, group in itertools.groupby(items, key=lambda item: item.article):
            group = list(group)
            plan = group[0].plan
            pools: list[list[Passage]] = [[] for _ in plan.windows]
            for item in group:
                pools[item.window.index] = item.pool
            # The spread windows rarely share a passage, and sharing its keys/values would run their inputs one by one.
            outcome = batches.run(lambda size: rerank_windows(
                model, tokenizer, plan.ids, [item.window for item in group], plan.queries, candidates=pools,
                config=scoring,
                batch_size=size, reuse_prefix_kv=False, show_progress=False))  # again, smaller, on OOM
            rows += [{"article": item.article, "window": item.window.index,
                      "query": list(query_span(item.window, scoring.query_length)),
                      "passage_ids": [p.id for p in item.pool], "retrieval_scores": [p.score for p in item.pool],
                      "ranking_nlls": ranking, "target_nlls": targets}
                     for item, ranking, targets in zip(group, outcome.ranking_nlls, outcome.target_nlls)]
        return rows

    chunks = ChunkRun(replace(run, output_dir=output_dir, chunk_size=run.chunk_size or CHUNK_SIZE))
    chunk_size = chunks.chunk_size
    t0 = time.perf_counter()
    articles_read = 0
    writer = chunks.open(RerankDataWriter, output_dir, settings, reproduce=rerun)
    saved = {position: (row["article"], row["window"])
             for (start, _), rows in writer.items() for position, row in enumerate(rows, start)}

    def collect(start: int, chunk: list[_Kept]) -> None:
        """Chunk ``start // chunk_size``, when it is this worker's: its windows not saved yet."""
        chunks.compute(start, start + len(chunk), lambda begin, end: records(chunk[begin - start : end - start]))

    position, chunk = 0, []
    with chunks.progress(max_windows, desc="Collecting rerank data", unit="win"):
        for article in _identified_once(articles):
            if max_windows is not None and position >= max_windows:
                break
            articles_read += 1
            for item in article_windows(article, None if max_windows is None else max_windows - position):
                if position in saved and saved[position] != (item.article, item.window.index):
                    raise ValueError(
                        f"{output_dir} holds the record of article id {saved[position][0]!r}, window "
                        f"{saved[position][1]} as window {position}, but the given articles make it article id "
                        f"{item.article!r}, window {item.window.index}: resume with the same articles in the "
                        "same order, or overwrite (--overwrite, overwrite=True).")
                chunk.append(item)
                position += 1
                if len(chunk) == chunk_size:  # chunk k holds the windows [k * chunk_size, (k + 1) * chunk_size)
                    collect(position - chunk_size, chunk)
                    chunk = []
        if chunk:
            collect(position - len(chunk), chunk)
    chunks.gather()  # the other workers' chunks: all of them once the last is in
    beyond = [span for span in writer.ranges() if span[1] > position]
    if beyond and not (max_windows is not None and position >= max_windows):
        raise ValueError(
            f"{output_dir} holds {beyond[-1][1]} windows, but the given articles make only {position}: resume with the "
            "same articles in the same order, or overwrite (--overwrite, overwrite=True).")
    seconds = time.perf_counter() - t0
    written = chunks.num_computed
    return {"output_dir": str(output_dir), "rows_written": written, "rows_resumed": chunks.num_resumed,
            "rows_total": writer.num_done, "complete": chunks.complete(position),
            "articles_read": articles_read, "seconds": seconds, "windows_per_s": written / seconds if seconds else 0.0,
            **({"accepted_unverified_chunks": writer.num_unverified} if run.accept_unverified else {}),
            **({"shard": chunks.shard.description} if chunks.shard.count > 1 else {})}


@dataclass(frozen=True)
class _Kept:
    """A window whose record is collected: its article's id and plan, the window, its candidates."""

    article: str
    plan: WindowPlan
    window: Window
    pool: list[Passage]


def spread_windows(num_windows: int, count: int) -> list[int]:
    """Indices of up to ``count`` of the windows ``1 .. num_windows - 1`` (window 0 has no retrieval), spread evenly:
    the middle window of each of ``count`` equal parts; all of them when there are no more than ``count``.

    Examples:
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

    Args:
        retriever: what retrieves.
        queries: the queries.
        k: the passages per query.
        title: the title left out.

    Returns:
        Per query, its top-``k`` passages of other titles.

    Examples:
        ```python
        retrieve_excluding_title(retriever, ["the emperor of rome"], k=2, title="Rome")  # no passage of "Rome"
        ```
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

    Examples:
        ```python
        articles = training_articles("wiki.jsonl.gz", exclude_titles={"Nero"}, num_articles=500)
        ```
    """
    if num_articles is not None:
        check_count("num_articles", num_articles)
    excluded = frozenset(exclude_titles)
    kept = (article for article in read_corpus(str(path)) if article["title"] not in excluded)
    return itertools.islice(kept, num_articles)


def _identified_once(articles: Iterable[Mapping[str, str]]) -> Iterator[Mapping[str, str]]:
    """The articles whose id and title did not come before: ids identify articles in the records (and resuming),
    titles their own passages."""
    seen_ids: set[str] = set()
    seen_titles: set[str] = set()
    for article in articles:
        title, article_id = article.get("title") or "", str(article.get("id", ""))
        if not title or title in seen_titles or article_id in seen_ids:
            why = "without a title" if not title else \
                f"whose title {title!r} came before" if title in seen_titles else f"whose id {article_id!r} came before"
            logger.warning("Skipping an article %s: ids and titles identify the articles of rerank data.", why)
            continue
        seen_ids.add(article_id)
        seen_titles.add(title)
        yield {**article, "id": article_id}
