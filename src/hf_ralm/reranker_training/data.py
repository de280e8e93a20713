"""Training data of the predictive reranker (Ram et al. 2023, §6.2): compact records, and the texts they stand for.

[`collect_rerank_data`][hf_ralm.reranker_training.collect_rerank_data] writes one **record** per window of a training
article: numbers and ids only, never texts, so that a long collection can be committed to a repository chunk by chunk:

```python
{"article": "12",                  # the article's corpus id
 "window": 57, "query": [211, 243],  # its window and the token positions of its query in the article
 "passage_ids": ["50012", ...],    # its k candidates (the retriever's ids, stable for an index's corpus)
 "retrieval_scores": [21.3, ...],
 "ranking_nlls": [40.1, ..., 41.7],  # the reader's NLL of the s' tokens before the target: zero-shot ranking
 "target_nlls": [9.8, ..., 10.4]}    # -log p(y | [d_i; x]) of the window's next stride y; both: no passage last
```

A data folder (a [`RecordStore`][hf_ralm.RecordStore] folder):

```text
DATA_DIR/
  rerank_data.json          the settings (reader, k, s, ℓ, s', corpus and articles fingerprints, ...) and, under
                            "reproduce", the command, git commit and paths of the run that started it
  chunk-00000000-00000064.json.gz   a complete chunk: the records of windows 0 to 63 (in writing order)
  .tmp-chunk-00000064-...           a chunk being written, or left by a crash: never read, replaced
```

``load_rerank_data`` gives the records back as **text rows**, what the cross-encoder trains on: the query text
(the reader's tokens of the article at the recorded positions, decoded), each candidate's text (``title\\ntext`` as
put in context, looked up by id in the index) and ``target_logprobs`` (negated target NLLs), with the no-passage
candidate's log-probability in ``no_passage_logprob``. It checks that the articles file and the index are the ones
the records were made from (their fingerprints).

Examples:
    ```python
    from hf_ralm.reranker_training import load_rerank_data, rerank_data_summary

    rerank_data_summary("data/rerank")   # {'windows': 2000, 'articles': 251, 'distinct_passages': 20417, ...}
    dataset, settings = load_rerank_data("data/rerank")   # the articles, index and tokenizer the run recorded
    dataset[0]["prefix"], dataset[0]["candidates"][0], dataset[0]["target_logprobs"][0]
    ```
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

import datasets

from ..errors import SettingError, setting
from ..runs.store import RecordStore
from ..selection.rules import choose_lowest, rank_correlation

METADATA_FILE = "rerank_data.json"

RECORD_KEYS = ("article", "window", "query", "passage_ids", "retrieval_scores", "ranking_nlls", "target_nlls")

# The settings the model card reports (reader, k, s, ℓ, s'); without them a trained reranker could not say what it
# was trained for. Other keys (max_length, max_doc_tokens, corpus, ...) are kept as given.
REQUIRED_METADATA = ("reader", "rerank_candidates", "retrieval_stride", "query_length", "rerank_tokens")
OLDER_NAMES = {"k": "rerank_candidates", "stride": "retrieval_stride", "max_length": "window_length"}
"""What the first rerank data folders (this repository's results/ among them) called settings that every run now
records under the setting's own name: read under the new name."""

FEATURES = datasets.Features(
    {
        "prefix": datasets.Value("string"),
        "candidates": datasets.List(datasets.Value("string")),
        "retrieval_scores": datasets.List(datasets.Value("float64")),
        "target_logprobs": datasets.List(datasets.Value("float64")),
        "no_passage_logprob": datasets.Value("float64"),
        "article": datasets.Value("string"),
        "window": datasets.Value("int64"),
    }
)
"""The text rows a reranker trains on (``load_rerank_data``; ``text_rows`` checks hand-made ones)."""
COLUMNS = tuple(FEATURES)

# Summed log-probabilities are <= 0; a little slack absorbs float rounding, while NLLs passed by mistake (> 0) fail.
_LOGPROB_SLACK = 1e-4


class RerankDataWriter(RecordStore):
    """Appends records (see the module docstring) to a rerank data folder in complete, gzip'd chunks of
    ``chunk_size`` windows.

    Opening a folder that already holds data of the same settings resumes it (``num_done`` records, read back with
    ``rows``); other settings are refused unless ``overwrite=True``, which deletes the folder's data files first.

    Examples:
        ```python
        settings = {"reader": "gpt2", "rerank_candidates": 2, "retrieval_stride": 4, "query_length": 32,
                    "rerank_tokens": 16}
        with RerankDataWriter("data/rerank", settings, chunk_size=64) as writer:
            writer.add([{"article": "7", "window": 3, "query": [0, 32], "passage_ids": ["10", "4"],
                         "retrieval_scores": [7.5, 3.1], "ranking_nlls": [30.2, 33.0, 31.5],
                         "target_nlls": [6.2, 9.8, 7.0]}])
        ```
    """

    settings_file = METADATA_FILE
    what = "rerank data"

    def normalise_settings(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        missing = [key for key in REQUIRED_METADATA if key not in metadata]
        if missing:
            raise SettingError(
                f"The settings lack {missing}: the trained reranker's card reports them, so pass "
                f"{list(REQUIRED_METADATA)} (plus any other settings, e.g. {setting('max_length')}, "
                f"{setting('max_doc_tokens')}, corpus)."
            )
        return super().normalise_settings(metadata)

    def prepare_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return validate_record(row)

    @classmethod
    def check_row(cls, row: Any, verified: bool) -> None:
        validate_record(row)  # finite numbers, always: a record with others is never saved


def validate_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as a plain dict of ``RECORD_KEYS``, or a ValueError saying what is wrong with it."""
    if not isinstance(record, Mapping):
        raise TypeError(f"A record must be a dict with the keys {list(RECORD_KEYS)}, got {type(record).__name__}.")
    missing, extra = set(RECORD_KEYS) - set(record), set(record) - set(RECORD_KEYS)
    if missing or extra:
        raise ValueError(f"A record must have exactly the keys {list(RECORD_KEYS)}; missing {sorted(missing)}, "
                         f"unknown {sorted(extra)}.")
    where = f"record (article {record['article']!r}, window {record['window']!r})"
    if not isinstance(record["article"], str):
        raise ValueError(f"{where}: 'article' must be the article's corpus id, a string.")
    if isinstance(record["window"], bool) or not isinstance(record["window"], int):
        raise ValueError(f"{where}: 'window' must be an int, got {record['window']!r}.")
    query = list(record["query"])
    if len(query) != 2 or not all(isinstance(i, int) for i in query) or not 0 <= query[0] < query[1]:
        raise ValueError(f"{where}: 'query' must be the [begin, end) token positions of the query, got {query}.")
    ids = [] if isinstance(record["passage_ids"], str) else list(record["passage_ids"])
    if not ids or not all(isinstance(i, str) for i in ids):
        raise ValueError(f"{where}: 'passage_ids' must be a non-empty list of the candidates' ids (strings).")
    numbers = {}
    for key, count in (("retrieval_scores", len(ids)), ("ranking_nlls", len(ids) + 1), ("target_nlls", len(ids) + 1)):
        values = [float(value) for value in record[key]]
        if len(values) != count:
            raise ValueError(f"{where}: {len(values)} {key} for {len(ids)} candidates; give {count}"
                             + (" (one per candidate, then no passage's)." if count > len(ids) else "."))
        if not all(math.isfinite(value) for value in values):
            raise ValueError(f"{where}: {key} must be finite, got {values}.")
        numbers[key] = values
    if min(numbers["target_nlls"]) < -_LOGPROB_SLACK:
        raise ValueError(f"{where}: target_nlls must be NLLs (>= 0), got {numbers['target_nlls']}; if these are "
                         "log-probabilities, negate them.")
    return {"article": record["article"], "window": record["window"], "query": query, "passage_ids": ids, **numbers}


def read_rerank_records(folder: str | os.PathLike) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """The records of a rerank data folder's complete chunks (in writing order), its settings and how its run was
    started (``{}`` when not recorded).

    Raises:
        FileNotFoundError: ``folder`` is no rerank data folder, or holds no complete chunk.

    Examples:
        ```python
        records, settings, reproduce = read_rerank_records("data/rerank")
        records[0]["target_nlls"][-1]   # the first window's target NLL without a passage
        ```
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"No rerank data folder at {folder}: collect one with hf-ralm rerank-data.")
    if not (folder / METADATA_FILE).is_file():
        raise FileNotFoundError(f"{folder} has no {METADATA_FILE}, so it is not a rerank data folder: point to the "
                                "folder hf-ralm rerank-data wrote.")
    chunks = RerankDataWriter.complete_chunks(folder)
    if not chunks:
        raise FileNotFoundError(f"{folder} holds no complete chunk (chunk-00000000-...json.gz): a "
                                "collection saves its records every chunk of windows and when it ends.")
    settings, reproduce = RerankDataWriter.read_settings(folder)
    if "rerank_candidates" not in settings:  # a folder of the first collections: its settings under today's names
        settings = {OLDER_NAMES.get(name, name): value for name, value in settings.items()}
    # each record checked as it is read (a damaged chunk named), and here made a plain dict of lists and floats
    records = [validate_record(record) for record in RerankDataWriter.read_rows(folder)]
    return records, settings, reproduce or {}


def rerank_data_summary(folder: str | os.PathLike, max_records: int | None = None) -> dict[str, Any]:
    """What a rerank data folder holds (its first ``max_records`` records; all when None), from its records alone:
    ``windows``, ``articles``, ``distinct_passages``,
    ``candidates`` (passages in all), ``no_passage_best`` (share of windows whose lowest target NLL is without a
    passage), ``top1_is_oracle`` (share whose best passage is retrieval's first), ``zero_shot_is_oracle`` (share
    whose best passage is also the reader's lowest ranking NLL: zero-shot reranking's hit rate),
    ``ranking_target_correlation`` (the mean over windows of the ``rank_correlation``
    between the passages' ranking and target NLLs), ``target_nll_by_rank`` (the mean target NLL of the passage at each
    retrieval rank, over the windows that have one there) and ``target_nll_no_passage`` (without a passage): what
    each candidate position is worth on average, the part of the choice a reranker needs no text for; and ``seconds``
    (what the chunks took to compute, across resumes).

    Examples:
        ```python
        rerank_data_summary("results/rerank-data-smollm2")["windows"]
        ```
    """
    records = read_rerank_records(folder)[0][:max_records]
    best = [min(range(len(r["target_nlls"])), key=r["target_nlls"].__getitem__) for r in records]
    best_passage = [choose_lowest(r["target_nlls"][: len(r["passage_ids"])]) for r in records]
    ranked = [r for r in records if len(r["passage_ids"]) > 1]
    return {
        "windows": len(records),
        "articles": len({r["article"] for r in records}),
        "distinct_passages": len({i for r in records for i in r["passage_ids"]}),
        "candidates": sum(len(r["passage_ids"]) for r in records),
        "no_passage_best": sum(b == len(r["passage_ids"]) for b, r in zip(best, records)) / len(records),
        "top1_is_oracle": sum(b == 0 for b in best_passage) / len(records),
        "zero_shot_is_oracle": sum(choose_lowest(r["ranking_nlls"][: len(r["passage_ids"])]) == b
                                   for r, b in zip(records, best_passage)) / len(records),
        "ranking_target_correlation": (sum(rank_correlation(r["ranking_nlls"][: len(r["passage_ids"])],
                                                            r["target_nlls"][: len(r["passage_ids"])])
                                           for r in ranked) / len(ranked)) if ranked else None,
        "target_nll_by_rank": [fmean([r["target_nlls"][rank] for r in records if len(r["passage_ids"]) > rank])
                               for rank in range(max(len(r["passage_ids"]) for r in records))],
        "target_nll_no_passage": fmean([r["target_nlls"][-1] for r in records]),
        "seconds": RerankDataWriter.chunk_seconds(folder),
    }


def file_fingerprint(path: str | os.PathLike) -> str:
    """A SHA-256 of a file's bytes: what settings record of the articles file (its path may differ elsewhere).

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "articles.jsonl")
        >>> _ = open(path, "w").write("")
        >>> file_fingerprint(path) == hashlib.sha256(b"").hexdigest()
        True
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def load_rerank_data(
    folder: str | os.PathLike,
    *,
    articles: str | os.PathLike | None = None,
    index_dir: str | os.PathLike | None = None,
    tokenizer=None,
) -> tuple[datasets.Dataset, dict[str, Any]]:
    """The records of a rerank data folder as text rows (``FEATURES``, in writing order) and its settings.

    The texts come back from where the records were made, by default what the run recorded under ``reproduce``.

    Args:
        folder: the rerank data folder.
        articles: the corpus-format file of the training articles (its fingerprint must be the one the settings
            record).
        index_dir: the retriever's index, which gives each passage's text by its id (built from the corpus the
            settings record).
        tokenizer: the reader's: a tokenizer, or a name or folder.

    Returns:
        The text rows (a ``datasets.Dataset``) and the folder's settings.

    Raises:
        ValueError: the articles file or the index is not the one the records were made from, or the file lacks an
            article of the records.

    Examples:
        ```python
        dataset, settings = load_rerank_data("data/rerank", index_dir="~/indexes/wiki-bm25")
        dataset[0]["prefix"], dataset[0]["no_passage_logprob"]
        ```
    """
    from ..config.passage_template import passage_text
    from ..retrieval.corpus import read_corpus
    from ..retrieval.factory import load_retriever
    from ..retrieval.index_folder import read_index_info

    records, settings, reproduce = read_rerank_records(folder)
    articles = _recorded_path(articles, reproduce, "articles", folder)
    index_dir = os.path.expanduser(str(_recorded_path(index_dir, reproduce, "index_dir", folder)))
    recorded = settings.get("articles_fingerprint")  # what the command line records; Python callers may not
    if recorded is not None and file_fingerprint(articles) != recorded:
        raise ValueError(f"{articles} is not the articles file {folder} was collected from (its SHA-256 differs "
                         "from the settings' articles_fingerprint): pass articles= (--articles) that file.")
    info = read_index_info(index_dir) or {}
    if info.get("fingerprint") != settings.get("corpus_fingerprint"):
        raise ValueError(f"The index {index_dir} was built from another corpus than the one {folder} was collected "
                         f"with (corpus fingerprint {info.get('fingerprint')}, the data's "
                         f"{settings.get('corpus_fingerprint')}): pass index_dir= (--index-dir) that index.")
    if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer or _recorded_path(None, reproduce, "reader_path",
                                                                                  folder)))
    wanted = {r["article"] for r in records}
    texts = {a["id"]: a["text"] for a in read_corpus(str(articles)) if a["id"] in wanted}
    missing = wanted - texts.keys()
    if missing:
        raise ValueError(f"{articles} has no article with the id(s) {sorted(missing)[:5]} of {folder}'s records.")
    retriever = load_retriever(settings.get("retriever", "bm25"), index_dir=index_dir)
    passage_ids = sorted({i for r in records for i in r["passage_ids"]})
    passages = dict(zip(passage_ids, retriever.passages_by_id(passage_ids)))
    template = settings.get("passage_template")
    token_ids = {}
    rows = []
    for r in records:
        if r["article"] not in token_ids:
            token_ids[r["article"]] = tokenizer(texts[r["article"]], add_special_tokens=False)["input_ids"]
        begin, end = r["query"]
        rows.append({
            "prefix": tokenizer.decode(token_ids[r["article"]][begin:end]),
            "candidates": [passage_text(passages[i].title, passages[i].text, *([template] if template else []))
                           for i in r["passage_ids"]],
            "retrieval_scores": r["retrieval_scores"],
            "target_logprobs": [-nll for nll in r["target_nlls"][:-1]],
            "no_passage_logprob": -r["target_nlls"][-1],
            "article": r["article"], "window": r["window"],
        })
    return text_rows(rows), settings


def text_rows(rows: Iterable[Mapping[str, Any]] | datasets.Dataset) -> datasets.Dataset:
    """Text rows (hand-made, or ``load_rerank_data``'s) checked and cast to ``FEATURES``: each needs
    ``prefix``, ``candidates`` (non-empty), one ``retrieval_scores`` and one ``target_logprobs`` (<= 0) per
    candidate; ``no_passage_logprob`` (``None`` when unknown), ``article`` and ``window`` may be left out.

    Examples:
        >>> text_rows([{"prefix": "the emperor of", "candidates": ["Rome\\nrome was"], "retrieval_scores": [7.5],
        ...             "target_logprobs": [-6.2]}])[0]["no_passage_logprob"] is None
        True
    """
    if isinstance(rows, datasets.Dataset):
        rows = rows.to_list()
    checked = [_check_text_row(row, i) for i, row in enumerate(rows)]
    if not checked:
        raise ValueError("No rows: the reranker needs windows to train on.")
    return datasets.Dataset.from_list(checked, features=FEATURES)


def _check_text_row(row: Mapping[str, Any], index: int) -> dict[str, Any]:
    where = f"row {index}"
    missing = [key for key in ("prefix", "candidates", "retrieval_scores", "target_logprobs") if key not in row]
    if missing:
        raise ValueError(f"{where} lacks {missing}: a text row holds prefix, candidates, retrieval_scores and "
                         "target_logprobs (and optionally no_passage_logprob, article, window).")
    if not isinstance(row["prefix"], str):
        raise ValueError(f"{where}: 'prefix' must be a string.")
    candidates = [] if isinstance(row["candidates"], str) else list(row["candidates"])
    if not candidates or not all(isinstance(text, str) for text in candidates):
        raise ValueError(f"{where}: 'candidates' must be a non-empty list of passage texts (\"title\\ntext\").")
    numbers = {}
    for key in ("retrieval_scores", "target_logprobs"):
        values = [float(value) for value in row[key]]
        if len(values) != len(candidates):
            raise ValueError(f"{where}: {len(values)} {key} for {len(candidates)} candidates; give one per "
                             "candidate.")
        if not all(math.isfinite(value) for value in values):
            raise ValueError(f"{where}: {key} must be finite, got {values}.")
        numbers[key] = values
    no_passage = row.get("no_passage_logprob")
    logprobs = numbers["target_logprobs"] + ([] if no_passage is None else [float(no_passage)])
    if max(logprobs) > _LOGPROB_SLACK:
        raise ValueError(f"{where}: target_logprobs must be log-probabilities (<= 0), got {logprobs}; if these are "
                         "NLLs, negate them.")
    return {"prefix": row["prefix"], "candidates": candidates, **numbers,
            "no_passage_logprob": None if no_passage is None else float(no_passage),
            "article": str(row.get("article", "")), "window": int(row.get("window", index))}


def _recorded_path(given, reproduce: Mapping[str, Any], key: str, folder) -> str | os.PathLike:
    """``given``, else the path the run recorded under ``key``; an error saying which argument to pass."""
    path = given if given is not None else reproduce.get(key)
    if path is None:
        raise ValueError(f"{folder} records no {key} (under 'reproduce' in its {METADATA_FILE}): pass it.")
    return path


def candidate_counts(dataset: datasets.Dataset) -> Sequence[int]:
    """The number of candidates of each text row (read from Arrow, without decoding the texts; a selection of rows
    counts its own rows)."""
    import pyarrow.compute as pc

    return pc.list_value_length(dataset.with_format("arrow")["candidates"]).to_pylist()
