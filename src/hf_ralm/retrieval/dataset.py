"""Retrieval results as a Hugging Face dataset: one row per evaluation window, with a fingerprint of everything they
depend on, so they can be shared (``push_retrieval_dataset``, a Hub dataset repository) and reused only where they
hold (``eval-lm --retrieval-file DIR`` or ``hf:REPO_ID``).

A retrieval dataset is a folder laid out as a Hub dataset repository:

```text
DIR/
  README.md                          the dataset card (YAML header: tags, the data files, the fingerprint's digest)
  retrieval_fingerprint.json         the fingerprint and what the rows hold (also in the Parquet file's metadata)
  data/train-00000-of-00001.parquet  one row per window, window 0 included (as in the paper's retrieval files)
```

The rows are the paper's retrieval-file items (``hf_ralm.retrieval.files``) in columns: ``window``,
``begin_location``, ``end_location``, ``query``, ``future``, and per passage (lists in retrieval order)
``passage_ids``, ``titles``, ``scores`` and, unless left out, ``texts`` (else fetched by id from the index:
[`passages_by_id`][hf_ralm.retrieval.Retriever.passages_by_id]); a reranked or gated run adds ``chosen``, ``rerank``,
``ranking_nlls``, ``no_passage_ranking_nll``, ``retrieval_gate``, ``gate_threshold`` and ``gate_score`` where it has
them. A run whose own fingerprint (``RetrievalFingerprint``) differs is refused, naming what differs.

Examples:
    ```python
    result = evaluate_retrieval(model, tokenizer, text, retriever, config)
    result.save_retrieval_dataset("retrievals", tokenizer)               # or hf-ralm retrieve --save-retrieval-dataset
    push_retrieval_dataset("retrievals", "me/wikitext-bm25-retrievals")
    evaluate_perplexity(model, tokenizer, text, retriever, config, retrieval_file="hf:me/wikitext-bm25-retrievals")
    ```
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..config.configuration_ralm import RalmConfig
from ..config.settings import SETTING_FLAGS
from ..errors import RetrievalFileError, setting, utf8_errors
from ..runs.output_folder import check_output_folder
from ..runs.fingerprints import digest, ids_fingerprint
from ..utils.atomic import write_durably, write_json_atomic, write_text_atomic
from ..utils.datasets_io import load_hf_dataset
from ..utils.paths import OFFLINE_HINT
from ..utils.reproduction import provenance
from ..core.windows import Window
from .base import retriever_identity
from .corpus import HUB_PREFIX
from .factory import pretrained_folder
from .files import Retrievals, retrievals_from_items

FINGERPRINT_FILE = "retrieval_fingerprint.json"
DATA_DIR = "data"
DATA_FILE = f"{DATA_DIR}/train-00000-of-00001.parquet"
CARD_FILE = "README.md"
FORMAT = "hf-ralm retrieval dataset 1"
METADATA_KEY = b"hf_ralm"
"""The key of the Parquet schema metadata that holds what ``retrieval_fingerprint.json`` holds."""

SELECTION_FIELDS = ("rerank", "rerank_candidates", "rerank_tokens", "reranker_model", "rerank_allow_no_passage",
                    "rerank_no_passage_margin", "rerank_seed", "retrieval_gate", "gate_threshold")
"""The [`RalmConfig`][hf_ralm.RalmConfig] settings that choose among the retrieved passages (reranking, gates)."""
READER_INPUT_FIELDS = ("max_doc_tokens", "bos_every_window", "passage_template")
"""What shapes the reader's inputs when it ranks the passages (the LM reranker, the oracle, the LM gate)."""

DOC_COLUMNS = {"id": "passage_ids", "title": "titles", "text": "texts", "score": "scores",
               "ranking_nll": "ranking_nlls"}
"""A retrieval-file passage's fields and the list columns that hold them, one list per window."""
WINDOW_COLUMNS = ("begin_location", "end_location", "query", "future")
CHOICE_COLUMNS = ("chosen", "rerank", "no_passage_ranking_nll", "retrieval_gate", "gate_threshold", "gate_score")
"""A reranked or gated item's own fields: columns only where some window has them (``None`` where one has not)."""


def _features(columns: Sequence[str]):
    """The ``datasets.Features`` of these columns of a retrieval dataset."""
    from datasets import Features, List, Value

    types = {"window": "int64", "begin_location": "int64", "end_location": "int64", "query": "string",
             "future": "string", "passage_ids": ["string"], "titles": ["string"], "texts": ["string"],
             "scores": ["float64"], "ranking_nlls": ["float64"], "chosen": "int64", "rerank": "string",
             "no_passage_ranking_nll": "float64", "retrieval_gate": "string", "gate_threshold": "float64",
             "gate_score": "float64"}
    return Features({name: List(Value(types[name][0])) if isinstance(types[name], list) else Value(types[name])
                     for name in columns})


def vocabulary_fingerprint(tokenizer) -> str:
    """A short identity of a tokenizer's vocabulary (tokens and ids, added tokens included): two tokenizers with the
    same one split a text into the same ids' meanings, wherever they were loaded from.

    Examples:
        ```python
        vocabulary_fingerprint(AutoTokenizer.from_pretrained("HuggingFaceTB/SmolLM2-135M"))  # '49152 tokens, 8d…'
        ```
    """
    vocabulary = tokenizer.get_vocab()
    return f"{len(vocabulary)} tokens, {digest(sorted(vocabulary.items()))}"


def retrieval_settings(config: RalmConfig, retriever, *, window_length: int, reader: dict | None = None) -> dict:
    """What the passages a run retrieves (and its choices among them) depend on besides its text and tokenizer: the
    retriever (``retriever_identity``; ``None`` without one), the window length, ``s``, ``ℓ``, the passage length cap
    ``max_doc_tokens`` (what the window must hold besides a stride), ``k`` (``num_retrieved``) and, for a run that
    reranks or gates, those that choose (with ``reader``, the identity of the LM that ranked, and its inputs' settings).

    Examples:
        >>> retrieval_settings(RalmConfig(), None, window_length=512)["k"]   # one passage per window, the paper's
        1
    """
    selection = {"rerank": config.rerank, "retrieval_gate": config.retrieval_gate}
    if config.rerank != "none" or config.retrieval_gate != "always":
        selection = {name: getattr(config, name) for name in SELECTION_FIELDS}
        if reader is not None:
            selection["reader"] = {**reader, **{name: getattr(config, name) for name in READER_INPUT_FIELDS}}
    return {"retriever": None if retriever is None else retriever_identity(retriever), "window_length": window_length,
            "retrieval_stride": config.retrieval_stride, "query_length": config.query_length_for(retriever),
            "max_doc_tokens": config.max_doc_tokens, "k": config.num_retrieved, "selection": selection}


@dataclass(frozen=True)
class RetrievalFingerprint:
    """Everything a run's retrievals depend on: a retrieval dataset records the one it was made with, and a run that
    reads it compares its own (``mismatch``).

    Attributes:
        text: The digest of the text's token ids.
        tokenizer: The tokenizer's name (a local folder's name, not its path), or ``None``.
        vocabulary: Its vocabulary's fingerprint (``vocabulary_fingerprint``).
        retriever: The retriever's identity (kind, corpus fingerprint, index settings, forbidden titles), or ``None``.
        window_length: The window length.
        retrieval_stride: The stride ``s``.
        query_length: The query length ``ℓ``.
        k: The passages retrieved per window.
        selection: The settings that chose among the passages (reranking, gates, and the reader when it ranked).
        max_doc_tokens: The passage length cap (``None``: a dataset from before it was recorded; not compared then).

    Examples:
        ```python
        fingerprint = RetrievalFingerprint.of(tokenizer, ids, retrieval_settings(config, bm25, window_length=512))
        fingerprint.digest()   # 'c0ffee…': what the dataset card shows
        ```
    """

    text: str
    tokenizer: str | None
    vocabulary: str
    retriever: dict | None
    window_length: int
    retrieval_stride: int
    query_length: int
    k: int
    selection: dict
    max_doc_tokens: int | None = None

    @classmethod
    def of(cls, tokenizer, ids: Sequence[int], settings: dict) -> "RetrievalFingerprint":
        """The fingerprint of retrievals for ``tokenizer``'s ids ``ids`` under ``settings`` (``retrieval_settings``)."""
        name = getattr(tokenizer, "name_or_path", None)
        if name and os.path.isdir(name):  # a local folder's name, not where it is on this machine (as model_identity)
            name = os.path.basename(os.path.normpath(name))
        return cls(text=ids_fingerprint(ids), tokenizer=name, vocabulary=vocabulary_fingerprint(tokenizer),
                   **settings)

    @classmethod
    def from_dict(cls, values: dict) -> "RetrievalFingerprint":
        """The fingerprint a ``retrieval_fingerprint.json`` records (``max_doc_tokens=None`` in one predating it)."""
        return cls(**{field.name: values[field.name] if field.default is dataclasses.MISSING
                      else values.get(field.name, field.default) for field in dataclasses.fields(cls)})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """A short digest of the whole fingerprint."""
        return digest(self.to_dict())

    @property
    def records_choices(self) -> bool:
        """Whether the retrievals record which passages were chosen (a reranked or gated run)."""
        return self.selection.get("rerank") != "none" or self.selection.get("retrieval_gate") != "always"

    def mismatch(self, run: "RetrievalFingerprint") -> str | None:
        """What makes these retrievals wrong for a run whose fingerprint is ``run`` (the first difference, as part of
        a sentence that says how to match it), or ``None``. The tokenizer is compared by its vocabulary (not its name:
        a Hub id and its local copy are the same tokenizer); ``k`` only when the run chooses the passages itself
        (retrievals that record choices are evaluated with them); the retriever only when the run has one."""
        windows = [(theirs is not None and theirs != ours,
                    f"was made with {what.format(theirs)} and this run has {what.format(ours)}: "
                    f"evaluate with {setting(name)}={theirs}")
                   for field, (name, what) in _WINDOW_SETTINGS.items()
                   for theirs, ours in [(getattr(self, field), getattr(run, field))]]
        checks = [
            (self.vocabulary != run.vocabulary,
             f"was made with another tokenizer ({self.tokenizer}, vocabulary {self.vocabulary}; this run's: "
             f"{run.tokenizer}, {run.vocabulary}): evaluate with {setting('tokenizer')}={self.tokenizer}"),
            (self.text != run.text,
             f"was made for another text ({self.text}; this run's: {run.text}): evaluate the text it was made for "
             f"(the same {setting('dataset_path')}, tokenizer and {setting('max_eval_tokens')})"),
            *windows,
            (not self.records_choices and self.k != run.k,
             f"holds k={self.k} passages per window and this run retrieves k={run.k} (set by "
             f"{setting('num_passages')}, {setting('ensemble_size')} or, reranking, {setting('rerank_candidates')}): "
             f"evaluate with settings that retrieve {self.k}"),
        ]
        if run.retriever is not None:
            theirs, ours = self.retriever or {}, run.retriever
            checks += [
                (theirs.get("retriever") != ours.get("retriever"),
                 f"was retrieved by {theirs.get('retriever')} and this run's retriever is {ours.get('retriever')}: "
                 f"evaluate with {setting('retriever')}={theirs.get('retriever')} and its index"),
                (theirs.get("corpus_fingerprint") != ours.get("corpus_fingerprint")
                 or theirs.get("index") != ours.get("index"),
                 f"was retrieved from another index (corpus {_short(theirs.get('corpus_fingerprint'))}, "
                 f"{_index_settings(theirs)}; this run's: corpus {_short(ours.get('corpus_fingerprint'))}, "
                 f"{_index_settings(ours)}): evaluate with the index it was made with ({setting('index_dir')})"),
                (theirs.get("forbidden_titles") != ours.get("forbidden_titles"),
                 f"was retrieved with other forbidden titles ({theirs.get('forbidden_titles')}; this run's: "
                 f"{ours.get('forbidden_titles')}): evaluate with the {setting('forbidden_titles')} it was made with"),
            ]
        return next((message for differs, message in checks if differs), None)


_WINDOW_SETTINGS = {"window_length": ("max_length", "windows of {} tokens"),
                    "retrieval_stride": ("retrieval_stride", "a retrieval every {} tokens"),
                    "query_length": ("query_length", "queries of {} tokens"),
                    "max_doc_tokens": ("max_doc_tokens", "passages cut to {} tokens")}
"""The fingerprint's window settings: the setting that gives each, and how a message says it; a run must have the
same (what the card's command gives: ``run_flags``). One not recorded (``None``: an older dataset) is not compared."""


def run_flags(fingerprint: RetrievalFingerprint) -> str:
    """The ``eval-lm`` flags a run needs to match ``fingerprint`` (what ``RetrievalFingerprint.mismatch``
    compares): each window setting's flag with its value (one not recorded left out) and, when the retrievals record
    no choices and hold more than one passage per window, ``--num-passages``.

    Examples:
        >>> run_flags(RetrievalFingerprint(text="t", tokenizer=None, vocabulary="v", retriever=None, window_length=16,
        ...           retrieval_stride=4, query_length=8, k=1, selection={"rerank": "none",
        ...           "retrieval_gate": "always"}, max_doc_tokens=8))
        '--max-length 16 --stride 4 --query-length 8 --max-doc-tokens 8'
    """
    values = {name: getattr(fingerprint, field) for field, (name, _) in _WINDOW_SETTINGS.items()}
    flags = [f"{SETTING_FLAGS[name].flag} {value}" for name, value in values.items() if value is not None]
    if not fingerprint.records_choices and fingerprint.k != 1:
        flags.append(f"--num-passages {fingerprint.k}")
    return " ".join(flags)


def _short(fingerprint: str | None) -> str:
    return "unknown" if fingerprint is None else fingerprint[:16]


def _index_settings(identity: dict) -> str:
    index = identity.get("index") or {}
    return ", ".join(f"{key}={value}" for key, value in sorted(index.items())) or "no settings recorded"


# ------------------------------------------------------------------------------------------------------------------
# Rows: the paper's retrieval-file items, in columns
# ------------------------------------------------------------------------------------------------------------------


def dataset_columns(records: Sequence[dict], passage_texts: bool = True) -> dict[str, list]:
    """The columns of the rows of a retrieval dataset from retrieval-file items
    (``hf_ralm.retrieval.files.retrieval_records``), without the passages' texts unless ``passage_texts``.

    Examples:
        >>> items = [{"begin_location": 0, "end_location": 8, "future": "a b", "query": None, "retrieved_docs": []},
        ...          {"begin_location": 8, "end_location": 12, "future": "c", "query": "a b",
        ...           "retrieved_docs": [{"id": "3", "title": "Rome", "text": "rome was", "score": 2.5}]}]
        >>> columns = dataset_columns(items, passage_texts=False)
        >>> list(columns)
        ['window', 'begin_location', 'end_location', 'query', 'future', 'passage_ids', 'titles', 'scores']
        >>> columns["passage_ids"], columns["scores"]
        ([[], ['3']], [[], [2.5]])
    """
    columns: dict[str, list] = {"window": list(range(len(records)))}
    for name in WINDOW_COLUMNS:
        columns[name] = [record.get(name) for record in records]
    for field, name in DOC_COLUMNS.items():
        if field == "text" and not passage_texts:
            continue
        if any(field in doc for record in records for doc in record["retrieved_docs"]):
            # None for a window whose passages lack the field (not ranked: no ranking_nll)
            columns[name] = [[doc[field] for doc in docs] if all(field in doc for doc in docs) else None
                             for docs in (record["retrieved_docs"] for record in records)]
    for name in CHOICE_COLUMNS:
        if any(name in record for record in records):
            columns[name] = [record.get(name) for record in records]
    return columns


def dataset_items(rows: dict[str, list]) -> list[dict]:
    """The retrieval-file items of a retrieval dataset's rows (columns as ``dataset_columns`` makes them; a
    passage without its text when the rows hold none). Raises [`RetrievalFileError`][hf_ralm.errors.RetrievalFileError]
    when the rows are not the windows in order or a window's passage lists differ in length."""
    items = []
    for i in range(len(rows["window"])):
        if rows["window"][i] != i:
            raise RetrievalFileError(f"row {i} holds window {rows['window'][i]}: the rows must be the windows in order")
        item = {name: rows[name][i] for name in WINDOW_COLUMNS}
        lists = {field: rows[name][i] for field, name in DOC_COLUMNS.items()
                 if name in rows and rows[name][i] is not None}
        if len({len(values) for values in lists.values()}) > 1:
            raise RetrievalFileError(f"window {i} has passage lists of different lengths "
                                     f"({', '.join(f'{DOC_COLUMNS[f]}: {len(v)}' for f, v in lists.items())})")
        item["retrieved_docs"] = [dict(zip(lists, values)) for values in zip(*lists.values())]
        item.update({name: rows[name][i] for name in CHOICE_COLUMNS if name in rows and rows[name][i] is not None})
        items.append(item)
    return items


# ------------------------------------------------------------------------------------------------------------------
# Writing, reading, sharing
# ------------------------------------------------------------------------------------------------------------------


def check_dataset_folder(path: str | os.PathLike) -> None:
    """Refuse ([`OutputFolderError`][hf_ralm.errors.OutputFolderError]) a folder a retrieval dataset cannot be saved
    in: only a missing or empty one, or a retrieval dataset hf-ralm wrote (it holds ``retrieval_fingerprint.json``),
    whose files are then replaced. Called before a run, so that its results are not lost at the end."""
    own = (FINGERPRINT_FILE, CARD_FILE, DATA_DIR) if (Path(path) / FINGERPRINT_FILE).is_file() else ()
    check_output_folder(path, own, "retrieval dataset", name="save_retrieval_dataset")


def save_retrieval_dataset(path: str | os.PathLike, records: Sequence[dict], fingerprint: RetrievalFingerprint, *,
                           passage_texts: bool = True, repo_id: str | None = None,
                           argv: Sequence[str] | None = None) -> None:
    """Write the retrieval-file items ``records`` (one per window, ``hf_ralm.retrieval.files.retrieval_records``) and
    their ``fingerprint`` as a retrieval dataset folder (see the module), each file atomically; with
    ``passage_texts=False`` without the passages' texts (read back by id from the index). The card's examples load it as
    ``hf:repo_id`` when given, and it shows the command that made it (``argv``; default: this process's). Only a missing
    or empty folder, or an earlier retrieval dataset, is written to (``check_dataset_folder``).

    Examples:
        ```python
        save_retrieval_dataset("retrievals", result.retrieval_records(tokenizer), fingerprint)
        ```
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_dataset_folder(path)
    columns = dataset_columns(records, passage_texts)
    info = {"format": FORMAT, "fingerprint": fingerprint.to_dict(), "fingerprint_digest": fingerprint.digest(),
            "num_windows": len(records), "passage_texts": passage_texts, "columns": list(columns),
            "reproduce": provenance(argv)}
    schema = _features(list(columns)).arrow_schema  # with the features the datasets library reads back
    schema = schema.with_metadata({**schema.metadata, METADATA_KEY: json.dumps(info).encode("utf-8")})
    table = pa.Table.from_pydict(columns, schema=schema)
    data = Path(path, DATA_FILE)
    data.parent.mkdir(parents=True, exist_ok=True)
    write_durably(data, lambda tmp: pq.write_table(table, tmp), data.with_name(f".tmp-{data.name}"))
    write_json_atomic(str(Path(path, FINGERPRINT_FILE)), info)
    write_text_atomic(str(Path(path, CARD_FILE)), str(retrieval_dataset_card(info, repo_id)), suffix=".md")


def retrieval_dataset_card(info: dict, repo_id: str | None = None):
    """The ``huggingface_hub.DatasetCard`` of a retrieval dataset (``info``: its ``retrieval_fingerprint.json``):
    what it is, how to evaluate with it (``hf:repo_id``, or its folder) and what it was made with."""
    from huggingface_hub import DatasetCard, DatasetCardData

    fingerprint = RetrievalFingerprint.from_dict(info["fingerprint"])
    retriever = fingerprint.retriever or {}
    kind = retriever.get("retriever", "unknown")
    where = f"hf:{repo_id}" if repo_id else "path/to/this/folder"
    data = DatasetCardData(
        pretty_name=f"In-Context RALM retrievals ({kind})",
        tags=["hf-ralm", "in-context-ralm", "retrieval-augmented-generation", "retrieval-results"],
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": f"{DATA_DIR}/*.parquet"}]}],
        hf_ralm={"format": FORMAT, "fingerprint": info["fingerprint_digest"]})
    rows = [("text", fingerprint.text), ("tokenizer", f"`{fingerprint.tokenizer}` ({fingerprint.vocabulary})"),
            ("retriever", f"`{kind}`"), ("corpus fingerprint", f"`{retriever.get('corpus_fingerprint')}`"),
            ("index settings", _index_settings(retriever)), ("forbidden titles", retriever.get("forbidden_titles")),
            ("window length L", fingerprint.window_length), ("stride s", fingerprint.retrieval_stride),
            ("query length ℓ", fingerprint.query_length),
            ("passage length cap",
             "not recorded" if fingerprint.max_doc_tokens is None else fingerprint.max_doc_tokens),
            ("passages per window k", fingerprint.k),
            ("choices", ", ".join(f"{key}={value}" for key, value in fingerprint.selection.items()))]
    texts = ("with their texts" if info["passage_texts"] else
             "without their texts: evaluating fetches them by id from the index it was made with (`--retriever "
             f"{kind} --index-dir ...`)")
    command = (info.get("reproduce") or {}).get("command")
    body = [
        f"# In-Context RALM retrievals ({kind})", "",
        f"What a `{kind}` retriever found for each of the {info['num_windows']:,} evaluation windows of one text under "
        "In-Context Retrieval-Augmented Language Modeling (Ram et al., 2023): every `s` tokens, the last `ℓ` tokens "
        f"before the window are the query. One row per window (window 0, which retrieves nothing, included), the "
        f"passages {texts}. Written by hf-ralm" + (f" with `{command}`." if command else "."), "",
        "## Use", "",
        "Evaluate a model that has the tokenizer below on the text these passages were retrieved for (`TEXT`: the "
        "same tokens, as the fingerprint's digest checks) with them instead of retrieving; a run whose text, "
        "tokenizer or settings differ from those below is refused, naming what differs:", "",
        "```bash",
        f"hf-ralm eval-lm --model MODEL --dataset-path TEXT {run_flags(fingerprint)} --retrieval-file {where}"
        + ("" if info["passage_texts"] else f" --retriever {kind} --index-dir INDEX"),
        "```", "", "or read the rows:", "", "```python", "from datasets import load_dataset", "",
        f'rows = load_dataset("{repo_id or "path/to/this/folder"}", split="train")', "```", "",
        "## Fingerprint", "",
        f"Digest `{info['fingerprint_digest']}`; the whole fingerprint is in `{FINGERPRINT_FILE}` and in the Parquet "
        "file's metadata.", "", "| what | value |", "|---|---|",
        *[f"| {name} | {value} |" for name, value in rows], "",
        "## Columns", "", ", ".join(f"`{name}`" for name in info["columns"]), "",
        "`passage_ids`, `titles`, `scores` (and `texts`, `ranking_nlls`) list a window's passages in retrieval order; "
        "`begin_location`/`end_location` are the token offsets of the tokens the window scores, `future` those tokens "
        "decoded; `chosen` is the index of the passage put in context (-1: none) when a reranker or a gate chose.", "",
    ]
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body))


def is_retrieval_dataset(spec: str | os.PathLike) -> bool:
    """Whether a ``--retrieval-file`` is a retrieval dataset (``hf:REPO_ID``, or a folder), not a JSON retrieval file.

    Examples:
        >>> is_retrieval_dataset("hf:me/retrievals"), is_retrieval_dataset("retrieval.json")
        (True, False)
    """
    return str(spec).startswith(HUB_PREFIX) or os.path.isdir(spec)


@dataclass
class RetrievalDataset:
    """A retrieval dataset on this machine.

    Attributes:
        name: What it was opened as.
        folder: Its folder (a Hub repository's downloaded snapshot for ``hf:REPO_ID``).
        info: Its ``retrieval_fingerprint.json``, checked to be the one its data was written with.

    Examples:
        ```python
        dataset = RetrievalDataset.open("hf:me/wikitext-bm25-retrievals")
        dataset.fingerprint.retrieval_stride   # 4
        ```
    """

    name: str
    folder: str
    info: dict

    @classmethod
    def open(cls, spec: str | os.PathLike, **hub_kwargs: Any) -> "RetrievalDataset":
        """The retrieval dataset of a folder, or of the Hub dataset repository ``hf:REPO_ID`` (downloaded into the HF
        cache; offline, ``HF_HUB_OFFLINE=1``, from there). ``hub_kwargs``: ``revision``, ``cache_dir``, ``token``."""
        spec = str(spec)
        folder = spec
        if spec.startswith(HUB_PREFIX):
            try:
                folder = pretrained_folder(spec[len(HUB_PREFIX):], repo_type="dataset", **hub_kwargs)
            except Exception as error:  # the Hub client raises many types for a repository it cannot get
                raise FileNotFoundError(f"The retrieval dataset {spec!r} could not be fetched from the Hugging Face "
                                        f"Hub ({OFFLINE_HINT}): {error}") from error
        path = Path(folder, FINGERPRINT_FILE)
        if not path.is_file():
            raise RetrievalFileError(f"{spec} is no retrieval dataset: it has no {FINGERPRINT_FILE}. hf-ralm retrieve "
                                     "--save-retrieval-dataset DIR writes one (data, fingerprint and card); a JSON "
                                     "retrieval file is named by its file.")
        with utf8_errors(str(path), RetrievalFileError, "fingerprint file"), open(path, encoding="utf-8") as f:
            try:
                info = json.load(f)
            except json.JSONDecodeError as error:
                raise RetrievalFileError(f"{path} is not JSON ({error.msg}, line {error.lineno}): the dataset is "
                                         "damaged; write it again with hf-ralm retrieve --save-retrieval-dataset.")
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            found = info.get("format") if isinstance(info, dict) else None
            raise RetrievalFileError(f"{path} is not a fingerprint of this hf-ralm ({found!r}, not {FORMAT!r}): write "
                                     "the dataset again with hf-ralm retrieve --save-retrieval-dataset.")
        dataset = cls(spec, folder, info)
        dataset._check_data()
        return dataset

    @property
    def fingerprint(self) -> RetrievalFingerprint:
        return RetrievalFingerprint.from_dict(self.info["fingerprint"])

    def data_files(self) -> list[Path]:
        return sorted(Path(self.folder, DATA_DIR).glob("*.parquet"))

    def _check_data(self) -> None:
        """Refuse data files that were not written with this fingerprint (a half-written or mixed folder)."""
        import pyarrow.parquet as pq

        files = self.data_files()
        if not files:
            raise RetrievalFileError(f"{self.name} has no data ({DATA_DIR}/*.parquet): the dataset is incomplete; "
                                     "write it again with hf-ralm retrieve --save-retrieval-dataset.")
        for file in files:
            stored = (pq.read_schema(file).metadata or {}).get(METADATA_KEY)
            if stored is None or json.loads(stored) != self.info:
                raise RetrievalFileError(f"{self.name}: {file.relative_to(self.folder)} was not written with its "
                                         f"{FINGERPRINT_FILE} (a folder mixed from two datasets, or one half "
                                         "written): write it again with hf-ralm retrieve --save-retrieval-dataset.")

    def digest(self) -> str:
        """The digest of the data files' bytes: what a resumable run records of the retrievals it reads."""
        return digest("".join(digest(file.read_bytes()) for file in self.data_files()).encode("utf-8"))

    def check_run(self, run: RetrievalFingerprint) -> None:
        """Refuse a run whose fingerprint is ``run`` when this dataset was not made for it: a
        [`RetrievalFileError`][hf_ralm.errors.RetrievalFileError], one line naming what differs and how to match it
        (``RetrievalFingerprint.mismatch``)."""
        problem = self.fingerprint.mismatch(run)
        if problem is not None:
            raise RetrievalFileError(f"{self.name} {problem}; or write a retrieval dataset for this run with hf-ralm "
                                     "retrieve --save-retrieval-dataset.")

    def retrievals(self, windows: Sequence[Window], run: RetrievalFingerprint, retriever=None) -> Retrievals:
        """The passages (and recorded choices) per window for a run with the fingerprint ``run`` over ``windows``,
        the passages' texts fetched by id from ``retriever`` when the dataset holds none.

        Raises:
            RetrievalFileError: the dataset was made for another text, tokenizer, settings or index (one line naming
                what differs and how to match it), or holds no texts and there is no retriever.
        """
        self.check_run(run)
        rows = load_hf_dataset(self.folder).to_dict()
        try:
            items = dataset_items(rows)
        except RetrievalFileError as error:
            raise RetrievalFileError(f"{self.name}: {error}; the dataset is damaged.") from None
        if not self.info["passage_texts"]:
            self._fetch_texts(items, retriever)
        return retrievals_from_items(self.name, items, windows)

    def _fetch_texts(self, items: list[dict], retriever) -> None:
        kind = (self.fingerprint.retriever or {}).get("retriever")
        if retriever is None:
            raise RetrievalFileError(f"{self.name} holds the passages' ids without their texts: evaluate with the "
                                     f"retriever it was made with ({setting('retriever')}={kind} and its "
                                     f"{setting('index_dir')}), which fetches them by id.")
        wanted = sorted({doc["id"] for item in items for doc in item["retrieved_docs"]}, key=_id_order)
        texts = {passage.id: passage.text for passage in retriever.passages_by_id(wanted)}
        for item in items:
            for doc in item["retrieved_docs"]:
                doc["text"] = texts[doc["id"]]


def _id_order(passage_id: str) -> tuple[int, int | str]:
    """Row-number ids in numeric order (one pass over an index's passage table), others after them."""
    return (0, int(passage_id)) if passage_id.isdigit() else (1, passage_id)


def retrieval_source_digest(path: str | os.PathLike) -> str:
    """The digest of what a run reads its retrievals from: a JSON retrieval file's bytes, or a retrieval dataset
    folder's data (``RetrievalDataset.digest``)."""
    if os.path.isdir(path):
        return RetrievalDataset.open(path).digest()
    return digest(Path(path).read_bytes())


def push_retrieval_dataset(path: str | os.PathLike, repo_id: str, *, private: bool | None = None,
                           token: str | None = None, commit_message: str | None = None,
                           revision: str | None = None) -> str:
    """Upload a retrieval dataset folder to a Hub dataset repository, where ``eval-lm --retrieval-file hf:REPO_ID``
    (or ``datasets.load_dataset(repo_id)``) finds it. A card as hf-ralm wrote it is first rewritten to name
    ``repo_id`` in its examples; a card you edited is uploaded as it is.

    Args:
        path: The folder (``save_retrieval_dataset``'s).
        repo_id: The repository, created when missing.
        private: Whether a repository created here is private (``None``: the Hub's default).
        token: The Hub token (``None``: the one logged in).
        commit_message: The commit's message (``None``: one naming what is uploaded).
        revision: The branch committed to (``None``: the default one).

    Returns:
        The commit's URL.

    Examples:
        ```python
        push_retrieval_dataset("retrievals", "me/wikitext-bm25-retrievals", private=True)
        ```
    """
    from huggingface_hub import HfApi

    dataset = RetrievalDataset.open(path) if os.path.isdir(path) else None
    if dataset is None:
        raise FileNotFoundError(f"No retrieval dataset folder {str(path)!r}: write one with hf-ralm retrieve "
                                "--save-retrieval-dataset DIR (or RalmEvalResult.save_retrieval_dataset).")
    card = Path(path, CARD_FILE)
    written = {str(retrieval_dataset_card(dataset.info, name)) for name in (None, repo_id)}
    if not card.is_file() or card.read_text(encoding="utf-8") in written:
        write_text_atomic(str(card), str(retrieval_dataset_card(dataset.info, repo_id)), suffix=".md")
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id, repo_type="dataset", folder_path=str(path), revision=revision,
            allow_patterns=[CARD_FILE, FINGERPRINT_FILE, f"{DATA_DIR}/*.parquet"],
            commit_message=commit_message or f"Upload In-Context RALM retrievals ({dataset.info['num_windows']} "
                                             "windows, hf-ralm)")
    except Exception as error:  # any Hub failure (network, login, name): the dataset is safe on disk
        raise OSError(f"Could not push {path} to the Hub dataset repository {repo_id!r} ({error}). The dataset is "
                      "saved there; push it again once the Hub is reachable and you are logged in (hf auth login): "
                      f"hf_ralm.retrieval.push_retrieval_dataset({str(path)!r}, {repo_id!r}).") from error
    return str(getattr(commit, "commit_url", commit))
