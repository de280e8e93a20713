"""The contract of every retriever backend: the :class:`Retriever` base class, the options a backend takes
(:class:`RetrieverOptions`), what identifies its passages in a run's settings (:meth:`Retriever.identity`), and the
passage record retrievers return.

A backend (``bm25``, ``lucene``, ``dense``, ``hybrid``, or one registered from outside hf-ralm: see
:mod:`hf_ralm.retrieval.registry`) is opened from its options with :meth:`Retriever.from_options` (one mapping, as
``from_pretrained(retriever_options=...)`` and the command line give it), described by :meth:`Retriever.config`,
rebuilt from that description with :meth:`Retriever.from_config`, and saved with :meth:`Retriever.save_pretrained` as
``retriever_config.json``. Nothing here assumes a local index: the backends that keep one in a folder share
:class:`~hf_ralm.retrieval.local.LocalIndexRetriever`'s build-or-load; a remote one (a search service, a vector
database) subclasses :class:`Retriever` directly.

Example:
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
from ..config.passages import Passage
from ..config.query_lengths import SPARSE_QUERY_LENGTH
from ..runs.fingerprints import titles_fingerprint
from ..utils.atomic import write_json_atomic
from ..utils.checks import check_count, check_path, check_texts, is_input_file
from .saved_paths import SAVED_INDEX_IDENTITY

RETRIEVER_CONFIG_FILE = "retriever_config.json"
SAVED_INDEX_DIR = "index"  # where save_pretrained(dir, save_index=True) puts a local index inside dir
UNRECORDED_INDEX_KEYS = ("files", "corpus", "fingerprint")
"""What an index records that is left out of :meth:`Retriever.identity`'s ``index``: its file sizes and corpus paths
(the same index, copied or moved, holds the same passages) and the corpus fingerprint (given on its own)."""


@dataclass(frozen=True)
class RetrieverOptions:
    """The options every backend takes: ``forbidden_titles``, the article titles whose passages it never returns
    (contamination). A backend declares its own as a dataclass that subclasses this one (or
    :class:`~hf_ralm.retrieval.local.IndexOptions`), with their defaults, and checks their values in
    ``__post_init__``; :meth:`Retriever.check_options` fills it from a mapping.

    Example::

        @dataclass(frozen=True)
        class SearchServiceOptions(RetrieverOptions):
            url: str = "http://localhost:9200"
            index: str = "wiki"
    """

    forbidden_titles: frozenset[str] = frozenset()


def option_names(options: type[RetrieverOptions]) -> list[str]:
    """The fields of an options class, the most specific first (a backend's own before those every backend takes),
    each in the order its class declares them: how an error lists what a backend takes."""
    groups: list[list[str]] = []
    seen: set[str] = set()
    for klass in reversed(options.__mro__):  # the most general first: each class's fields beyond its bases'
        if dataclasses.is_dataclass(klass):
            groups.append([field.name for field in dataclasses.fields(klass) if field.name not in seen])
            seen.update(groups[-1])
    return [name for group in reversed(groups) for name in group]


class Retriever(ABC):
    """The base class of every retriever backend.

    A backend sets ``name`` (its name in the registry) and ``Options`` (a :class:`RetrieverOptions` dataclass: what
    :meth:`from_options` takes), implements :meth:`_open` (its retriever from checked options), :meth:`retrieve` and
    :meth:`index_record` (what identifies its passages), keeps the titles it must never return in
    ``forbidden_titles``, and extends :meth:`config` with the options that reopen it. It declares besides its
    ``default_query_length`` (ℓ when ``query_length`` is not set, read by the registry:
    :func:`~hf_ralm.retrieval.registry.register_retriever`), the options of its saved description that name paths
    (``saved_path_options``) and the parts of it that describe other retrievers (``saved_parts``). Objects that merely
    have a batched ``retrieve(queries, k)`` are accepted wherever a retriever is (``load_retriever``,
    ``RetrievalAugmentedModel``); only a ``Retriever`` can be saved.

    Example (a remote backend, one file: its registration is one more line, see
    :func:`~hf_ralm.retrieval.registry.register_retriever`)::

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
    """

    name: ClassVar[str]
    Options: ClassVar[type[RetrieverOptions]] = RetrieverOptions
    default_query_length: ClassVar[int] = SPARSE_QUERY_LENGTH
    """The query length ℓ this backend's queries get when ``query_length`` is not set: the paper's best for sparse
    retrieval, 32 tokens, unless the backend declares its own (the dense one: 64)."""
    saved_path_options: ClassVar[Mapping[str, tuple[str, ...]]] = {"forbidden_titles": ("str", "list")}
    """The options of this backend's saved description that name paths, and what each may be (``"str"``: a string,
    ``"list"``: a list of strings): checked before anything reads them
    (:func:`~hf_ralm.retrieval.factory.check_retriever_config`)."""
    saved_parts: ClassVar[tuple[str, ...]] = ()
    """The keys of this backend's saved description that hold other retrievers' descriptions (a hybrid retriever's
    sides), each checked as a description of its own."""
    forbidden_titles: frozenset[str]

    @classmethod
    def check_options(cls, **options: Any) -> RetrieverOptions:
        """``options`` as this backend's :attr:`Options`: ``None`` means the default, ``forbidden_titles`` may be a
        file (or a shipped list's name: :func:`read_forbidden_titles`) or titles, and an option the backend does not
        take is refused in one line that names the backend and the options it takes.

        Example::

            BM25Retriever.check_options(index_dir="wiki-bm25", n_threads=4).n_threads   # 4
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
        """The retriever ``options`` describe (checked by :meth:`check_options`): for a backend with a local index,
        opened, or built from ``corpus`` when missing or stale (:class:`~hf_ralm.retrieval.local.LocalIndexRetriever`);
        for a remote one, connected.

        Example::

            BM25Retriever.from_options(corpus="wiki.jsonl.gz", index_dir="wiki-bm25", forbidden_titles="wikitext-103")
        """
        return cls._open(cls.check_options(**options))

    @classmethod
    @abstractmethod
    def _open(cls, options: RetrieverOptions) -> "Retriever":
        """The backend's part of :meth:`from_options`: its retriever from checked options."""

    @abstractmethod
    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """Top-``k`` passages per query, best first. A query may get fewer than ``k`` passages (or none)."""

    @abstractmethod
    def index_record(self) -> Mapping[str, Any]:
        """What the index says about itself: the ``fingerprint`` of the corpus it holds (passage ids are that
        corpus's passages), its size and what decides its ranking (scoring, text analysis, encoder); never where it
        is. :meth:`identity` is made of it. A local index gives its ``hf_ralm_index.json``; a remote one what its
        service says (an index name and version, a document count), ``{}`` when it says nothing."""

    def identity(self) -> dict[str, Any]:
        """What identifies the retrieved passages in settings that must compare equal elsewhere (a run's records,
        a retrieval dataset): the retriever kind, the fingerprint of the corpus its index holds, what the index
        records about its passages and ranking (:meth:`index_record`, without file sizes or corpus paths, so that
        records made here resume from a copy of the index elsewhere) and its forbidden titles.

        Example::

            bm25.identity()["corpus_fingerprint"]   # 'e0b8cc01f966ef0833ed9cfaab95c0c96c33500d3dd...'
        """
        recorded = self.index_record()
        return {"retriever": self.name, "corpus_fingerprint": recorded.get("fingerprint"),
                "index": {key: value for key, value in recorded.items() if key not in UNRECORDED_INDEX_KEYS},
                "forbidden_titles": titles_fingerprint(self.forbidden_titles)}

    def max_scores(self, queries: Sequence[str]) -> list[float]:
        """Per query, the highest score any passage could reach for it, so that ``score / max_score`` compares
        across queries (what the ``"score"`` retrieval gate thresholds). A backend whose scores have such a bound
        overrides this; the others cannot be gated by score.

        Example::

            retriever.max_scores(["the emperor of Rome"])   # [14.2]: BM25, the sum of the query terms' idf
        """
        raise SettingError(f"The {self.name} retriever's scores have no known maximum per query, so they cannot be "
                           f"compared across queries: {setting('retrieval_gate')}='score' needs the bm25 retriever "
                           f"(or dense with normalised embeddings); use {setting('retrieval_gate')}='lm' instead.")

    def passages_by_id(self, ids: Sequence[str]) -> list[Passage]:
        """The passages with these ids (as :meth:`retrieve` gives them; score 0), in the order of ``ids``: how
        records that keep only ids (e.g. the predictive reranker's training data) get their texts back. A backend
        whose index stores the passages overrides this.

        Example::

            retriever.passages_by_id(["12", "7"])[0].id   # '12'
        """
        raise ValueError(f"The {self.name} retriever cannot look passages up by id: use an index that stores them "
                         "(bm25, dense).")

    def config(self) -> dict:
        """What :meth:`from_config` rebuilds this retriever from: its kind and options (those of :meth:`from_options`;
        a backend adds its own)."""
        return {"type": self.name, "forbidden_titles": sorted(self.forbidden_titles)}

    @classmethod
    def from_config(cls, config: dict, *, base_dir: str | None = None, config_file: str = RETRIEVER_CONFIG_FILE,
                    **overrides) -> "Retriever":
        """The retriever a :meth:`config` describes. ``base_dir`` is the folder the config was read from (its file
        ``config_file``; ``None``: a description the caller gives, whose paths are the caller's): the paths it
        records are relative to that folder and followed only inside it (:meth:`_saved_settings`; a saved folder is
        read through :func:`~hf_ralm.retrieval.factory.retriever_from_folder`, which checks the description and its
        corpus and forbidden-titles files first). ``overrides``
        replace saved values (``forbidden_titles``, ``index_dir``, the backend's options) or add ``corpus``, which
        rebuilds a stale index; ``None`` keeps the saved value.

        Example::

            BM25Retriever.from_config({"type": "bm25", "index_dir": "index"}, base_dir="my-retriever",
                                      forbidden_titles={"Nero"})
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
        """``settings`` read from ``config_file`` in the saved (or downloaded) ``folder``, as :meth:`from_options`
        takes them: a backend that reads paths from a saved folder joins them to ``folder`` here, and refuses one that
        leads outside it (a folder from elsewhere must not make hf-ralm open, build or delete anything elsewhere)."""
        return settings

    def save_pretrained(self, save_directory: str | os.PathLike, save_index: bool = False) -> None:
        """Write :meth:`config` to ``save_directory/retriever_config.json``, which
        :func:`~hf_ralm.retrieval.load_retriever_from_pretrained` reads back. With ``save_index``, a local index
        folder is first copied into ``save_directory/index`` (a backend without one has nothing to copy). An index
        inside ``save_directory`` is recorded relative to it, so the folder keeps working when moved or pushed to the
        Hub; one outside by its absolute path and its identity (corpus fingerprint and files,
        :func:`~hf_ralm.retrieval.saved_paths.recorded_index_dir`): loading opens it there, read only, on this
        machine while it is still that index, never from a folder downloaded from the Hub nor with a corpus that would
        build there (:func:`~hf_ralm.retrieval.saved_paths.saved_index_dir`); elsewhere the folder needs the index
        given (``index_dir=``)."""
        save_directory = check_path("save_directory", save_directory)
        os.makedirs(save_directory, exist_ok=True)
        config = self._saved_config(save_directory, SAVED_INDEX_DIR if save_index else None)
        write_json_atomic(os.path.join(save_directory, RETRIEVER_CONFIG_FILE), config)

    def _saved_config(self, save_directory: str, index_copy: str | None) -> dict:
        """:meth:`config` as saved in ``save_directory``, a local index first copied to ``save_directory/index_copy``
        when that is given (:class:`~hf_ralm.retrieval.local.LocalIndexRetriever`)."""
        return self.config()


def checked_queries(queries: Any, k: Any = 1) -> list[str]:
    """``queries`` as a list of texts, and ``k`` a count of at least 1, or a refusal naming the argument
    (:func:`~hf_ralm.utils.checks.check_texts`, :func:`~hf_ralm.utils.checks.check_count`): what every built-in
    backend's :meth:`Retriever.retrieve` checks first, so that ``None``, one query given as a string (a search per
    character) or a query that is no text is refused there, not deep in a search library. An empty list asks for
    nothing (no results).

    Example:
        >>> checked_queries(("the emperor of Rome",), k=2)
        ['the emperor of Rome']
    """
    check_count("k", k)
    return check_texts("queries", queries, allow_empty=True)


def passages_from_table(table, hits: Sequence[Sequence[tuple[int, float]]]) -> list[list[Passage]]:
    """Per query, its ``hits`` (row number in a passage table, score) as passages, in order: one read of the table's
    distinct rows. The table is a ``datasets.Dataset`` with ``title`` and ``text`` columns whose row numbers are the
    passage ids (the bm25 and dense indexes).

    Example:
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
    by_row = {i: (title, text) for i, title, text in zip(wanted, found["title"], found["text"])}
    return [[Passage(str(int(i)), *by_row[int(i)], float(score)) for i, score in row] for row in hits]


PACKAGED_TITLES = {"wikitext-103": "wikitext-103_forbidden_titles.txt"}
"""Title lists shipped with hf-ralm (``hf_ralm/resources``), by the name ``--forbidden-titles`` takes: the paper's
published list of the WikiText-103 valid and test articles."""


def read_forbidden_titles(path: str | None, name: str = "forbidden_titles") -> frozenset[str]:
    """Titles, one per line, whose passages retrieval must never return (e.g. the evaluation set's own articles);
    none for ``path=None``. ``path`` is a file, or the name of a list shipped with hf-ralm (:data:`PACKAGED_TITLES`:
    ``"wikitext-103"``, the paper's list for WikiText-103) when no file has that name.

    A missing file, one that holds no title (an empty list would silently turn the filter off) or one that is not
    UTF-8 raises an error naming the file and the setting ``name`` (the caller's name for it).

    Example:
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
    """What identifies retrieved passages in settings that must compare equal elsewhere: a :class:`Retriever`'s
    :meth:`~Retriever.identity`; for any other object with a ``retrieve`` method, its class name (it records no
    corpus).

    Example::

        retriever_identity(bm25)["corpus_fingerprint"]   # 'e0b8cc01f966ef0833ed9cfaab95c0c96c33500d3dd...'
    """
    if not isinstance(retriever, Retriever):
        return {"retriever": type(retriever).__name__, "corpus_fingerprint": None}
    return retriever.identity()
