"""The contract of every retriever backend: the [`Retriever`][hf_ralm.retrieval.Retriever] base class, the options a
backend takes (``RetrieverOptions``), what identifies its passages in a run's settings
([`Retriever.identity`][hf_ralm.retrieval.Retriever.identity]), and the passage record retrievers return.

A backend (``bm25``, ``lucene``, ``dense``, ``hybrid``, or one registered from outside hf-ralm: see
``hf_ralm.retrieval.registry``) is opened from its options with
[`Retriever.from_options`][hf_ralm.retrieval.Retriever.from_options] (one mapping, as
``from_pretrained(retriever_options=...)`` and the command line give it), described by
[`Retriever.config`][hf_ralm.retrieval.Retriever.config], rebuilt from that description with
[`Retriever.from_config`][hf_ralm.retrieval.Retriever.from_config], and saved with
[`Retriever.save_pretrained`][hf_ralm.retrieval.Retriever.save_pretrained] as ``retriever_config.json``. Nothing here
assumes a local index: the backends that keep one in a folder share ``LocalIndexRetriever``'s build-or-load
(``hf_ralm.retrieval.local``); a remote one (a search service, a vector database) subclasses
[`Retriever`][hf_ralm.retrieval.Retriever] directly.

Examples:
    >>> from hf_ralm.retrieval import BM25Retriever, load_retriever_from_pretrained
    >>> retriever = BM25Retriever.from_options(corpus="wiki.jsonl.gz")  # index in ~/.cache/hf-ralm  # doctest: +SKIP
    >>> retriever.retrieve(["the emperor of Rome"], k=2)             # [[Passage, Passage]]       # doctest: +SKIP
    >>> retriever.identity()["corpus_fingerprint"]                   # 'e0b8cc01f966ef08...'      # doctest: +SKIP
    >>> retriever.save_pretrained("my-retriever", save_index=True)                                  # doctest: +SKIP
    >>> load_retriever_from_pretrained("my-retriever")                                              # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

from ..errors import InputError, MissingFileError, SettingError, setting, utf8_errors
from ..core.passages import Passage
from ..config.query_lengths import SPARSE_QUERY_LENGTH
from ..runs.fingerprints import titles_fingerprint
from ..utils.atomic import write_json_atomic
from ..utils.checks import check_count, check_path, check_texts, is_input_file
from .saved_paths import SAVED_INDEX_IDENTITY

RETRIEVER_CONFIG_FILE = "retriever_config.json"
SAVED_INDEX_DIR = "index"  # where save_pretrained(dir, save_index=True) puts a local index inside dir
UNRECORDED_INDEX_KEYS = ("files", "corpus", "fingerprint")
"""What an index records that is left out of [`Retriever.identity`][hf_ralm.retrieval.Retriever.identity]'s ``index``:
its file sizes and corpus paths (the same index, copied or moved, holds the same passages) and the corpus fingerprint
(given on its own)."""


@dataclass(frozen=True)
class RetrieverOptions:
    """The options every backend takes. A backend declares its own as a dataclass that subclasses this one (or
    ``IndexOptions``, for a local index), with their defaults, and checks their values in ``__post_init__``;
    [`Retriever.check_options`][hf_ralm.retrieval.Retriever.check_options] fills it from a mapping.

    Attributes:
        forbidden_titles: the article titles whose passages the backend never returns (contamination).

    Examples:
        ```python
        @dataclass(frozen=True)
        class SearchServiceOptions(RetrieverOptions):
            url: str = "http://localhost:9200"
            index: str = "wiki"
        ```
    """

    forbidden_titles: frozenset[str] = frozenset()


def option_names(options: type[RetrieverOptions]) -> list[str]:
    """The fields of an options class, the most specific first (a backend's own before those every backend takes), each
    in the order its class declares them: how an error lists what a backend takes.

    Args:
        options: a ``RetrieverOptions`` dataclass (a backend's ``Options``).

    Returns:
        The field names.
    """
    groups: list[list[str]] = []
    seen: set[str] = set()
    for klass in reversed(options.__mro__):  # the most general first: each class's fields beyond its bases'
        if dataclasses.is_dataclass(klass):
            groups.append([field.name for field in dataclasses.fields(klass) if field.name not in seen])
            seen.update(groups[-1])
    return [name for group in reversed(groups) for name in group]


class Retriever(ABC):
    """The base class of every retriever backend.

    A backend sets ``name`` and ``Options``, implements ``_open`` (its retriever from checked options),
    [`retrieve`][hf_ralm.retrieval.Retriever.retrieve] and [`index_record`][hf_ralm.retrieval.Retriever.index_record]
    (what identifies its passages), keeps the titles it must never return in ``forbidden_titles``, and extends
    [`config`][hf_ralm.retrieval.Retriever.config] with the options that reopen it. It declares besides its
    [`default_query_length`][hf_ralm.retrieval.Retriever.default_query_length] (ℓ when ``query_length`` is not set, read
    by the registry: [`register_retriever`][hf_ralm.retrieval.register_retriever]), the options of its saved description
    that name paths ([`saved_path_options`][hf_ralm.retrieval.Retriever.saved_path_options]) and the parts of it that
    describe other retrievers ([`saved_parts`][hf_ralm.retrieval.Retriever.saved_parts]). Objects that merely have a
    batched ``retrieve(queries, k)`` are accepted wherever a retriever is (``load_retriever``,
    ``RetrievalAugmentedModel``); only a ``Retriever`` can be saved.

    Attributes:
        name: the backend's name in the registry.
        Options: its options, a ``RetrieverOptions`` dataclass: what
            [`from_options`][hf_ralm.retrieval.Retriever.from_options] takes.
        forbidden_titles: the article titles whose passages it never returns.

    Examples:
        A remote backend, one file (its registration is one more line: see
        [`register_retriever`][hf_ralm.retrieval.register_retriever]):

        ```python
        class SearchServiceRetriever(Retriever):
            name = "search-service"
            Options = SearchServiceOptions

            @classmethod
            def _open(cls, options):
                return cls(options.url, options.index, options.forbidden_titles)

            def retrieve(self, queries, k=1): ...          # one request per batch of queries
            def index_record(self): ...                    # {"fingerprint": ..., "num_passages": ...}
            def config(self):
                return {**super().config(), "url": self.url, "index": self.index}
        ```
    """

    name: ClassVar[str]
    Options: ClassVar[type[RetrieverOptions]] = RetrieverOptions
    default_query_length: ClassVar[int] = SPARSE_QUERY_LENGTH
    """The query length ℓ this backend's queries get when ``query_length`` is not set: the paper's best for sparse
    retrieval, 32 tokens, unless the backend declares its own (the dense one: 64)."""
    saved_path_options: ClassVar[Mapping[str, tuple[str, ...]]] = {"forbidden_titles": ("str", "list")}
    """The options of this backend's saved description that name paths, and what each may be (``"str"``: a string,
    ``"list"``: a list of strings): checked before anything reads them (``check_retriever_config``, in
    ``hf_ralm.retrieval.factory``)."""
    saved_parts: ClassVar[tuple[str, ...]] = ()
    """The keys of this backend's saved description that hold other retrievers' descriptions (a hybrid retriever's
    sides), each checked as a description of its own."""
    forbidden_titles: frozenset[str]

    @classmethod
    def check_options(cls, **options: Any) -> RetrieverOptions:
        """``options`` as this backend's ``Options``, checked.

        Args:
            **options: the backend's options by name: ``None`` means the default, and ``forbidden_titles`` may be a file
                (or a shipped list's name: ``read_forbidden_titles``) or titles.

        Returns:
            The backend's ``Options`` dataclass, filled.

        Raises:
            ValueError: an option the backend does not take; the message names the backend and the options it takes.

        Examples:
            ```python
            BM25Retriever.check_options(index_dir="wiki-bm25", n_threads=4).n_threads   # 4
            ```
        """
        options = {key: value for key, value in options.items() if value is not None}
        known = option_names(cls.Options)
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(f"The {cls.name} retriever has no option {', '.join(map(repr, unknown))}; its options "
                             f"are: {', '.join(known)}.")
        titles = options.get("forbidden_titles", ())
        if isinstance(titles, (str, os.PathLike)):
            titles = read_forbidden_titles(str(titles))
        return cls.Options(**{**options, "forbidden_titles": frozenset(titles)})

    @classmethod
    def from_options(cls, **options: Any) -> "Retriever":
        """The retriever ``options`` describe: for a backend with a local index, opened, or built from ``corpus`` when
        missing or stale (``LocalIndexRetriever``); for a remote one, connected.

        Args:
            **options: the backend's options by name, checked by
                [`check_options`][hf_ralm.retrieval.Retriever.check_options].

        Returns:
            The backend's retriever.

        Examples:
            ```python
            BM25Retriever.from_options(corpus="wiki.jsonl.gz", index_dir="wiki-bm25", forbidden_titles="wikitext-103")
            ```
        """
        return cls._open(cls.check_options(**options))

    @classmethod
    @abstractmethod
    def _open(cls, options: RetrieverOptions) -> "Retriever":
        """The backend's part of [`from_options`][hf_ralm.retrieval.Retriever.from_options]: its retriever from checked
        options."""

    @abstractmethod
    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """Top-``k`` passages per query, best first. A query may get fewer than ``k`` passages (or none).

        Args:
            queries: the query texts.
            k: the passages per query.

        Returns:
            Per query, its passages.
        """

    @abstractmethod
    def index_record(self) -> Mapping[str, Any]:
        """What the index says about itself: the ``fingerprint`` of the corpus it holds (passage ids are that corpus's
        passages), its size and what decides its ranking (scoring, text analysis, encoder); never where it is.
        [`identity`][hf_ralm.retrieval.Retriever.identity] is made of it. A local index gives its
        ``hf_ralm_index.json``; a remote one what its service says (an index name and version, a document count), ``{}``
        when it says nothing."""

    def identity(self) -> dict[str, Any]:
        """What identifies the retrieved passages in settings that must compare equal elsewhere (a run's records, a
        retrieval dataset).

        Returns:
            The retriever kind (``retriever``), the fingerprint of the corpus its index holds (``corpus_fingerprint``),
                what the index records about its passages and ranking (``index``:
                [`index_record`][hf_ralm.retrieval.Retriever.index_record], without file sizes or corpus paths, so that
                records made here resume from a copy of the index elsewhere) and its forbidden titles
                (``forbidden_titles``, a fingerprint).

        Examples:
            ```python
            bm25.identity()["corpus_fingerprint"]   # 'e0b8cc01f966ef0833ed9cfaab95c0c96c33500d3dd...'
            ```
        """
        recorded = self.index_record()
        return {"retriever": self.name, "corpus_fingerprint": recorded.get("fingerprint"),
                "index": {key: value for key, value in recorded.items() if key not in UNRECORDED_INDEX_KEYS},
                "forbidden_titles": titles_fingerprint(self.forbidden_titles)}

    def max_scores(self, queries: Sequence[str]) -> list[float]:
        """Per query, the highest score any passage could reach for it, so that ``score / max_score`` compares across
        queries (what the ``"score"`` retrieval gate thresholds). A backend whose scores have such a bound overrides
        this; the others cannot be gated by score.

        Args:
            queries: the query texts.

        Returns:
            Per query, its bound.

        Raises:
            SettingError: the backend's scores have no known maximum (the message says which retrieval gate to use
                instead).

        Examples:
            ```python
            retriever.max_scores(["the emperor of Rome"])   # [14.2]: BM25, the sum of the query terms' idf
            ```
        """
        raise SettingError(f"The {self.name} retriever's scores have no known maximum per query, so they cannot be "
                           f"compared across queries: {setting('retrieval_gate')}='score' needs the bm25 retriever "
                           f"(or dense with normalised embeddings); use {setting('retrieval_gate')}='lm' instead.")

    def passages_by_id(self, ids: Sequence[str]) -> list[Passage]:
        """The passages with these ids (as [`retrieve`][hf_ralm.retrieval.Retriever.retrieve] gives them; score 0), in
        the order of ``ids``: how records that keep only ids (e.g. the predictive reranker's training data) get their
        texts back. A backend whose index stores the passages overrides this.

        Args:
            ids: passage ids.

        Returns:
            The passages.

        Raises:
            ValueError: the backend cannot look passages up by id.

        Examples:
            ```python
            retriever.passages_by_id(["12", "7"])[0].id   # '12'
            ```
        """
        raise ValueError(f"The {self.name} retriever cannot look passages up by id: use an index that stores them "
                         "(bm25, dense).")

    def config(self) -> dict:
        """What [`from_config`][hf_ralm.retrieval.Retriever.from_config] rebuilds this retriever from: its kind and
        options (those of [`from_options`][hf_ralm.retrieval.Retriever.from_options]; a backend adds its own)."""
        return {"type": self.name, "forbidden_titles": sorted(self.forbidden_titles)}

    @classmethod
    def from_config(cls, config: dict, *, base_dir: str | None = None, config_file: str = RETRIEVER_CONFIG_FILE,
                    **overrides) -> "Retriever":
        """The retriever a [`config`][hf_ralm.retrieval.Retriever.config] describes.

        Args:
            config: the description (``type`` and options).
            base_dir: the folder the config was read from (``None``: a description the caller gives, whose paths are the
                caller's): the paths it records are relative to that folder and followed only inside it
                (``_saved_settings``; a saved folder is read through ``retriever_from_folder``, in
                ``hf_ralm.retrieval.factory``, which checks the description and its corpus and forbidden-titles files
                first).
            config_file: the config's file in ``base_dir``, for messages.
            **overrides: replace saved values (``forbidden_titles``, ``index_dir``, the backend's options) or add
                ``corpus``, which rebuilds a stale index; ``None`` keeps the saved value.

        Returns:
            The retriever.

        Raises:
            ValueError: ``config`` describes another backend's retriever (``load_retriever`` rebuilds any).

        Examples:
            ```python
            BM25Retriever.from_config({"type": "bm25", "index_dir": "index"}, base_dir="my-retriever",
                                      forbidden_titles={"Nero"})
            ```
        """
        if config.get("type", cls.name) != cls.name:
            raise ValueError(f"{cls.__name__} cannot rebuild a {config['type']!r} retriever: use "
                             "hf_ralm.retrieval.load_retriever(config).")
        overrides = {key: value for key, value in overrides.items() if value is not None}
        settings = {key: value for key, value in config.items() if key != "type"}
        if base_dir is not None:
            settings = cls._saved_settings(settings, base_dir, config_file, overrides)
        # how a saved folder recognises its index outside it (read by _saved_settings), not an option
        settings = {key: value for key, value in settings.items() if key != SAVED_INDEX_IDENTITY}
        return cls.from_options(**{**settings, **overrides})

    @classmethod
    def _saved_settings(cls, settings: dict, folder: str, config_file: str, overrides: dict) -> dict:
        """``settings`` read from ``config_file`` in the saved (or downloaded) ``folder``, as
        [`from_options`][hf_ralm.retrieval.Retriever.from_options] takes them: a backend that reads paths from a saved
        folder joins them to ``folder`` here, and refuses one that leads outside it (a folder from elsewhere must not
        make hf-ralm open, build or delete anything elsewhere)."""
        return settings

    def save_pretrained(self, save_directory: str | os.PathLike, save_index: bool = False) -> None:
        """Write [`config`][hf_ralm.retrieval.Retriever.config] to ``save_directory/retriever_config.json``, which
        [`load_retriever_from_pretrained`][hf_ralm.retrieval.load_retriever_from_pretrained] reads back.

        An index inside ``save_directory`` is recorded relative to it, so the folder keeps working when moved or pushed
        to the Hub; one outside by its absolute path and its identity (corpus fingerprint and files,
        ``recorded_index_dir``): loading opens it there, read only, on this machine while it is still that index, never
        from a folder downloaded from the Hub nor with a corpus that would build there (``saved_index_dir``; both in
        ``hf_ralm.retrieval.saved_paths``); elsewhere the folder needs the index given (``index_dir=``).

        Args:
            save_directory: the folder to write (made when missing).
            save_index: first copy a local index folder into ``save_directory/index`` (a backend without one has nothing
                to copy).
        """
        save_directory = check_path("save_directory", save_directory)
        os.makedirs(save_directory, exist_ok=True)
        config = self._saved_config(save_directory, SAVED_INDEX_DIR if save_index else None)
        write_json_atomic(os.path.join(save_directory, RETRIEVER_CONFIG_FILE), config)

    def _saved_config(self, save_directory: str, index_copy: str | None) -> dict:
        """[`config`][hf_ralm.retrieval.Retriever.config] as saved in ``save_directory``, a local index first copied to
        ``save_directory/index_copy`` when that is given (``LocalIndexRetriever``)."""
        return self.config()


def checked_queries(queries: Any, k: Any = 1) -> list[str]:
    """``queries`` as a list of texts, and ``k`` a count of at least 1, or a refusal naming the argument
    (``check_texts``, ``check_count``, in ``hf_ralm.utils.checks``): what every built-in backend's
    [`Retriever.retrieve`][hf_ralm.retrieval.Retriever.retrieve] checks first, so that ``None``, one query given as a
    string (a search per character) or a query that is no text is refused there, not deep in a search library. An empty
    list asks for nothing (no results).

    Args:
        queries: the queries a caller gave.
        k: the passages per query a caller asked for.

    Returns:
        The queries, as a list.

    Examples:
        >>> checked_queries(("the emperor of Rome",), k=2)
        ['the emperor of Rome']
    """
    check_count("k", k)
    return check_texts("queries", queries, allow_empty=True)


def passages_from_table(table, hits: Sequence[Sequence[tuple[int, float]]]) -> list[list[Passage]]:
    """Per query, its ``hits`` as passages, in order: one read of the table's distinct rows.

    Args:
        table: a ``datasets.Dataset`` with ``title`` and ``text`` columns whose row numbers are the passage ids (the
            bm25 and dense indexes).
        hits: per query, its ``(row number in the table, score)`` pairs.

    Returns:
        Per query, its passages.

    Raises:
        ValueError: a row number outside the table.

    Examples:
        >>> from datasets import Dataset
        >>> table = Dataset.from_dict({"title": ["A", "B"], "text": ["a text", "b text"]})
        >>> passages_from_table(table, [[(1, 2.5), (0, 1.0)], []])[0][0]
        Passage(id='1', title='B', text='b text', score=2.5)
    """
    wanted = sorted({int(i) for row in hits for i, _ in row})
    if wanted and not 0 <= wanted[0] <= wanted[-1] < len(table):
        bad = next(i for i in wanted if not 0 <= i < len(table))
        raise ValueError(f"No passage with the id {bad}: the index holds the ids 0 to {len(table) - 1}.")
    found = table[wanted] if wanted else {"title": [], "text": []}
    by_row = dict(zip(wanted, zip(map(str, wanted), found["title"], found["text"])))  # each id's string made once
    return [[Passage(*by_row[int(i)], float(score)) for i, score in row] for row in hits]


PACKAGED_TITLES = {"wikitext-103": "wikitext-103_forbidden_titles.txt"}
"""Title lists shipped with hf-ralm (``hf_ralm/resources``), by the name ``--forbidden-titles`` takes: the paper's
published list of the WikiText-103 valid and test articles."""


def read_forbidden_titles(path: str | None, name: str = "forbidden_titles") -> frozenset[str]:
    """Titles, one per line, whose passages retrieval must never return (e.g. the evaluation set's own articles). Each
    refusal below names the file and the setting ``name``.

    Args:
        path: a file, or the name of a list shipped with hf-ralm (``PACKAGED_TITLES``: ``"wikitext-103"``, the paper's
            list for WikiText-103) when no file has that name; ``None``: no titles.
        name: the caller's name for the setting, which the errors name.

    Returns:
        The titles.

    Raises:
        MissingFileError: the file is missing.
        SettingError: it holds no title (an empty list would silently turn the filter off).
        InputError: it is not UTF-8.

    Examples:
        >>> len(read_forbidden_titles("wikitext-103"))   # the paper's list, shipped with hf-ralm
        125
    """
    if path is None:
        return frozenset()
    if path in PACKAGED_TITLES and not os.path.exists(path):
        path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "resources", PACKAGED_TITLES[path])
    if not is_input_file(path, f"{setting(name)} file"):  # a FIFO is refused, not waited on
        raise MissingFileError(f"The {setting(name)} file {path!r} does not exist: give a text file with one article "
                               "title per line, or the name of a list shipped with hf-ralm "
                               f"({', '.join(PACKAGED_TITLES)}).")
    with utf8_errors(path, InputError, "titles file"), open(path, encoding="utf-8") as f:
        titles = frozenset(line.strip() for line in f if line.strip())
    if not titles:
        raise SettingError(f"The {setting(name)} file {path!r} holds no titles: give one article title per line, or "
                           f"leave {setting(name)} out.")
    return titles


def retriever_identity(retriever) -> dict[str, Any]:
    """What identifies retrieved passages in settings that must compare equal elsewhere.

    Args:
        retriever: a [`Retriever`][hf_ralm.retrieval.Retriever], or any other object with a ``retrieve`` method.

    Returns:
        A ``Retriever``'s [`identity`][hf_ralm.retrieval.Retriever.identity]; for any other object, its class name (it
            records no corpus).

    Examples:
        ```python
        retriever_identity(bm25)["corpus_fingerprint"]   # 'e0b8cc01f966ef0833ed9cfaab95c0c96c33500d3dd...'
        ```
    """
    if not isinstance(retriever, Retriever):
        return {"retriever": type(retriever).__name__, "corpus_fingerprint": None}
    return retriever.identity()
