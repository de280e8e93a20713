"""The base class every retriever backend subclasses, and the passage record retrievers return.

A backend (``bm25``, ``lucene``, ``dense``, ``hybrid``; see :mod:`hf_ralm.retrieval.registry`) is built or opened
with :meth:`Retriever.build_or_load`, described by :meth:`Retriever.config`, rebuilt from that description with
:meth:`Retriever.from_config`, and saved with :meth:`Retriever.save_pretrained` as ``retriever_config.json``.

Example:
    >>> from hf_ralm.retrieval import BM25Retriever, load_retriever_from_pretrained
    >>> retriever = BM25Retriever.build_or_load("wiki.jsonl.gz")      # index in ~/.cache/hf-ralm  # doctest: +SKIP
    >>> retriever.retrieve(["the emperor of Rome"], k=2)             # [[Passage, Passage]]       # doctest: +SKIP
    >>> retriever.save_pretrained("my-retriever", save_index=True)                                  # doctest: +SKIP
    >>> load_retriever_from_pretrained("my-retriever")                                              # doctest: +SKIP
"""

from __future__ import annotations

import functools
import inspect
import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Iterable, Sequence

from ..errors import InputError, MissingFileError, SettingError, setting, utf8_errors
from ..passages import Passage
from ..records import titles_fingerprint
from ..utils.atomic import write_json_atomic
from .corpus import WORDS_PER_PASSAGE
from .index_folder import building, copy_index, default_index_dir, path_for_folder, read_index_info, saved_path

RETRIEVER_CONFIG_FILE = "retriever_config.json"
SAVED_INDEX_DIR = "index"  # where save_pretrained(dir, save_index=True) puts the index inside dir


class Retriever(ABC):
    """The base class of every retriever backend.

    A backend sets ``name`` (its name in the registry), implements :meth:`retrieve` and :meth:`_build_or_load`, and
    keeps its index folder in ``index_dir`` and the titles it must never return in ``forbidden_titles`` (what the
    default :meth:`config` and :meth:`save_pretrained` record). Objects that merely have a batched
    ``retrieve(queries, k)`` are accepted wherever a retriever is (``load_retriever``, ``RetrievalAugmentedModel``);
    only a ``Retriever`` can be saved.
    """

    name: ClassVar[str]
    index_dir: str
    forbidden_titles: frozenset[str]

    @abstractmethod
    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """Top-``k`` passages per query, best first. A query may get fewer than ``k`` passages (or none)."""

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

    @classmethod
    def build_or_load(
        cls,
        corpus: str | Sequence[str] | None,
        index_dir: str | None = None,
        *,
        forbidden_titles: Iterable[str] = (),
        words_per_passage: int = WORDS_PER_PASSAGE,
        **options,
    ) -> "Retriever":
        """Open the index in ``index_dir``, first (re)building it there from the ``corpus`` files when it is missing
        or was built from other files or settings; without a corpus, just open it. Without ``index_dir`` the index
        lives in hf-ralm's cache, ``<cache>/indexes/<name>-<corpus fingerprint[:16]>`` (see
        :func:`~hf_ralm.retrieval.index_folder.default_index_dir`), and the corpus is required. ``options`` are the
        backend's own (those of its ``_build_or_load``); ``None`` means the backend's default. Concurrent calls for
        one folder build it once: the others wait and open it (:func:`~hf_ralm.retrieval.index_folder.building`).

        Example::

            BM25Retriever.build_or_load("wiki.jsonl.gz", "wiki-bm25", forbidden_titles={"Nero"})
        """
        options = {key: value for key, value in options.items() if value is not None}
        known = [p for p in inspect.signature(cls._build_or_load).parameters
                 if p not in ("corpus", "index_dir", "forbidden_titles", "words_per_passage")]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(f"The {cls.name} retriever has no option {', '.join(map(repr, unknown))}; its options "
                             f"are: {', '.join(known) or 'none'}.")
        if index_dir is None:
            index_dir = default_index_dir(cls.name, corpus, words_per_passage)
        load = functools.partial(cls._build_or_load, corpus, str(index_dir),
                                 forbidden_titles=frozenset(forbidden_titles), words_per_passage=words_per_passage,
                                 **options)
        if corpus is None:  # opening only
            return load()
        with building(str(index_dir)):
            return load()

    @classmethod
    @abstractmethod
    def _build_or_load(
        cls, corpus: str | Sequence[str] | None, index_dir: str, *, forbidden_titles: frozenset[str],
        words_per_passage: int, **options,
    ) -> "Retriever":
        """The backend's part of :meth:`build_or_load`, once the index folder is known."""

    def config(self) -> dict:
        """What :meth:`from_config` rebuilds this retriever from (the index folder as an absolute path)."""
        return {
            "type": self.name,
            "index_dir": os.path.abspath(self.index_dir),
            "forbidden_titles": sorted(self.forbidden_titles),
        }

    @classmethod
    def from_config(cls, config: dict, *, base_dir: str | None = None, config_file: str = RETRIEVER_CONFIG_FILE,
                    **overrides) -> "Retriever":
        """The retriever a :meth:`config` describes. ``base_dir`` is the folder the config was read from (its file
        ``config_file``; ``None``: a description the caller gives, whose paths are the caller's): the paths it
        records are relative to that folder and followed only inside it (:meth:`_saved_settings`). ``overrides``
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
        settings.update(overrides)
        corpus, index_dir = settings.pop("corpus", None), settings.pop("index_dir", None)
        return cls.build_or_load(corpus, index_dir, **settings)

    @classmethod
    def _saved_settings(cls, settings: dict, folder: str, config_file: str, overrides: dict) -> dict:
        """``settings`` read from ``config_file`` in the saved (or downloaded) ``folder``, with the index folder they
        record joined to ``folder`` unless ``overrides`` give one: a path that leads outside ``folder`` is refused
        (:func:`~hf_ralm.retrieval.index_folder.saved_path`; a folder from elsewhere must not make hf-ralm open,
        build or delete an index elsewhere), and so is a missing index unless ``corpus`` rebuilds it. A backend that
        reads other paths from a saved folder checks them here too."""
        if "index_dir" not in settings or "index_dir" in overrides:
            return settings
        recorded = settings["index_dir"]
        where = os.path.normpath(os.path.join(folder, recorded))
        index_dir = saved_path(recorded, folder, config_file, "index_dir",
                               f"give the index folder yourself ({setting('index_dir')}={where!r}) to use it, or save "
                               "the retriever with save_pretrained(dir, save_index=True) so that its index travels "
                               "inside the folder.")
        if "corpus" not in overrides and not os.path.exists(index_dir):
            raise FileNotFoundError(
                f"The {cls.name} retriever saved in {folder!r} uses the index {index_dir!r}, which does not exist "
                "here. Save it with save_pretrained(dir, save_index=True) to keep the index inside the saved folder, "
                "or give the index folder (index_dir=) or the corpus to rebuild it (corpus=)."
            )
        return {**settings, "index_dir": index_dir}

    def save_pretrained(self, save_directory: str | os.PathLike, save_index: bool = False) -> None:
        """Write :meth:`config` to ``save_directory/retriever_config.json``, which
        :func:`~hf_ralm.retrieval.load_retriever_from_pretrained` reads back. With ``save_index``, the index folder
        is first copied into ``save_directory/index``. An index inside ``save_directory`` is recorded relative to it,
        so the folder keeps working when moved or pushed to the Hub; one outside by its absolute path, which loading
        does not follow (a saved folder's paths are followed only inside it): it then needs the index folder given
        (``index_dir=``)."""
        save_directory = str(save_directory)
        os.makedirs(save_directory, exist_ok=True)
        config = self._saved_config(save_directory, SAVED_INDEX_DIR if save_index else None)
        write_json_atomic(os.path.join(save_directory, RETRIEVER_CONFIG_FILE), config)

    def _saved_config(self, save_directory: str, index_copy: str | None) -> dict:
        """:meth:`config` as saved in ``save_directory``: the index first copied to ``save_directory/index_copy``
        when that is given, its folder recorded relative to ``save_directory`` when inside it."""
        index_dir = self.index_dir
        if index_copy is not None:
            index_dir = copy_index(index_dir, os.path.join(save_directory, index_copy))
        return {**self.config(), "index_dir": path_for_folder(index_dir, save_directory)}


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
    if not os.path.isfile(path):
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
    """What identifies retrieved passages in settings that must compare equal elsewhere: the retriever kind, the
    fingerprint of the corpus its index was built from (passage ids are row numbers of that corpus's passages), what
    the index records about its scoring and text analysis (another analysis ranks other passages) and its forbidden
    titles; never the index's path, so that records made here resume from a copy of the index elsewhere.

    Example::

        retriever_identity(bm25)["corpus_fingerprint"]   # 'e0b8cc01f966ef0833ed9cfaab95c0c96c33500d3dd...'
    """
    if not isinstance(retriever, Retriever):
        return {"retriever": type(retriever).__name__, "corpus_fingerprint": None}
    recorded = read_index_info(retriever.index_dir) or {}
    return {"retriever": retriever.name, "corpus_fingerprint": recorded.get("fingerprint"),
            # not its file sizes or corpus paths: the same index, copied or moved, holds the same passages
            "index": {key: value for key, value in recorded.items() if key not in ("files", "corpus", "fingerprint")},
            "forbidden_titles": titles_fingerprint(retriever.forbidden_titles)}
