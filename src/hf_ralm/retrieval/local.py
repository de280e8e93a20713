"""The backends that keep their index in a local folder (``bm25``, ``lucene``, ``dense``; ``hybrid``'s two sides): one
build-or-load for all of them, ``LocalIndexRetriever``, and the options every such index takes, ``IndexOptions``
(``corpus``, ``index_dir``, ``words_per_passage``).

``LocalIndexRetriever.build_or_load`` (the template) finds the folder (``index_dir``, or one in hf-ralm's cache named by
the corpus fingerprint), takes the folder's build lock, reuses a whole index built from the same corpus files with the
same settings, and otherwise builds one into ``<index_dir>.tmp`` and moves it to ``index_dir``, with the messages and
the safety rules of ``hf_ralm.retrieval.index_builds`` (a build goes only into a missing or empty folder or over a whole
hf-ralm index of the same backend that holds nothing else; it removes only the files that index lists as hf-ralm's,
never the folder). A backend fills in only what is its own:

* ``Options`` (its options: an ``IndexOptions`` dataclass), ``index_files`` (its files, checked in an index that records
  no file sizes), ``index_keys`` (what opening reads from ``hf_ralm_index.json``) and ``index_settings`` (what an index
  must record to be used: its scoring, its text analysis);
* ``BuildOptions``, if its build takes options that ``hf-ralm index`` offers as flags (a dataclass of
  [`index_flag`][hf_ralm.retrieval.index_flag] fields, each an option of ``Options``), and ``default_query_length`` when
  its best query length is not the paper's 32 for sparse retrieval;
* ``_write_index``: its files written into the temporary build folder from the passages, or ``_build`` for a build of
  its own (the dense backend's sharded, resumable encoding);
* ``_load``: its retriever over a checked index folder;
* ``build_shared``, only for a build its workers share otherwise than by waiting for the one that builds (the dense
  backend's encoding) or that they must not share (hybrid).

Examples:
    A backend's build, from the passages:

    ```python
    class WordCountRetriever(LocalIndexRetriever):
        name = "word-count"
        index_files = ("counts.json",)

        @classmethod
        def _write_index(cls, tmp_dir, passages, paths, options, show_progress):
            ...  # write counts.json into tmp_dir
            return num_passages, {"scoring": "word counts"}

        @classmethod
        def _load(cls, index_dir, options):
            return cls(index_dir, options.forbidden_titles)
    ```
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Iterator, Mapping, Sequence

from ..errors import SettingError, setting
from ..runs.shards import Shard
from ..utils.checks import refuse_type
from .base import Retriever, RetrieverOptions
from .corpus import WORDS_PER_PASSAGE, passage_rows
from .index_builds import announce_build, build_pace, building, copy_index, corpus_files, corpus_paths_and_articles
from .index_builds import default_index_dir, finish_build, index_matches, new_build, reusable_index_info
from .index_folder import read_index_info
from .saved_paths import SAVED_INDEX_IDENTITY, recorded_index_dir, saved_index_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexOptions(RetrieverOptions):
    """The options of every backend with a local index.

    Attributes:
        corpus: the corpus file(s) the index is built from when missing or stale (``None``: the index is only opened).
        index_dir: the folder the index lives in (``None``: a folder in hf-ralm's cache named by the corpus fingerprint,
            ``default_index_dir``).
        words_per_passage: the passage size (0 keeps the corpus rows as they are).
    """

    corpus: str | Sequence[str] | None = None
    index_dir: str | os.PathLike | None = None
    words_per_passage: int = WORDS_PER_PASSAGE

    def __post_init__(self):
        """``corpus`` as ``str`` path(s), or a refusal naming it: anything else would be taken as rows to index, or fail
        in ``os.stat`` naming nothing."""
        if self.corpus is not None:
            object.__setattr__(self, "corpus", _corpus_paths(self.corpus))


_CORPUS = "a corpus file's path or an hf:DATASET (a str or an os.PathLike), or a list of them"


def _corpus_paths(corpus: Any) -> str | list[str]:
    """A ``corpus`` option as ``IndexOptions`` keeps it: one path (a ``str``) or a non-empty list of them."""
    if isinstance(corpus, (str, os.PathLike)):
        return os.fspath(corpus)
    if not isinstance(corpus, (list, tuple)):
        refuse_type("corpus", corpus, _CORPUS)
    if not corpus:
        raise SettingError(f"{setting('corpus')} is an empty list: give at least one corpus file.")
    for i, path in enumerate(corpus):
        if not isinstance(path, (str, os.PathLike)):
            refuse_type("corpus", path, "a corpus file's path (a str or an os.PathLike)", item=i)
    return [os.fspath(path) for path in corpus]


@dataclass(frozen=True)
class IndexSummary:
    """An index built or reused (``LocalIndexRetriever.build_shared``).

    Attributes:
        index_dir: its folder.
        num_passages: its passages.
    """

    index_dir: str
    num_passages: int


class LocalIndexRetriever(Retriever):
    """A backend whose index is a local folder (``index_dir``), built there from a corpus when missing or stale: the
    template ``build_or_load`` and its hooks (see the module's docstring).

    Attributes:
        index_dir: the index folder.
        info: the index's ``hf_ralm_index.json`` as read when it was opened.
        index_files: the backend's files in the folder (glob patterns), checked in an index that records no file sizes.
        index_keys: what opening reads from ``hf_ralm_index.json``.
        index_settings: what an index must record to be used (its scoring, its text analysis; ``None``: nothing).
    """

    Options: ClassVar[type[IndexOptions]] = IndexOptions
    BuildOptions: ClassVar[type | None] = None
    """The dataclass whose [`index_flag`][hf_ralm.retrieval.index_flag] fields are this backend's flags of
    ``hf-ralm index``, each passed to the build as the option of that name (``None``: none). hf-ralm's own declare it in
    a plain-Python module (the dense one's: ``DenseBuildOptions``, in ``hf_ralm.retrieval.dense_options``), which
    ``--help`` reads without importing the backend."""
    saved_path_options: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "index_dir": ("str",), "corpus": ("str", "list"), **Retriever.saved_path_options}
    index_files: ClassVar[tuple[str, ...]] = ()
    index_keys: ClassVar[tuple[str, ...]] = ()
    index_settings: ClassVar[Mapping[str, Any] | None] = None

    index_dir: str
    info: dict

    @classmethod
    def build_or_load(
        cls,
        corpus: str | Sequence[str] | None,
        index_dir: str | os.PathLike | None = None,
        *,
        forbidden_titles: Iterable[str] = (),
        words_per_passage: int = WORDS_PER_PASSAGE,
        **options: Any,
    ) -> "LocalIndexRetriever":
        """Open the index in ``index_dir``, first (re)building it there from the ``corpus`` files when it is missing or
        was built from other files or settings; without a corpus, just open it. Concurrent calls for one folder build it
        once: the others wait and open it (``building``, in ``hf_ralm.retrieval.index_builds``).

        Args:
            corpus: the corpus file(s) (``None``: open the index only).
            index_dir: the index folder; ``None``: the index lives in hf-ralm's cache,
                ``<cache>/indexes/<name>-<corpus fingerprint[:16]>`` (``default_index_dir``), and the corpus is
                required.
            forbidden_titles: the article titles whose passages are never returned.
            words_per_passage: the passage size (0 keeps the corpus rows as they are).
            **options: the backend's own (its ``Options``); ``None`` means the backend's default.

        Returns:
            The backend's retriever over the index.

        Examples:
            ```python
            BM25Retriever.build_or_load("wiki.jsonl.gz", "wiki-bm25", forbidden_titles={"Nero"})
            ```
        """
        return cls.from_options(corpus=corpus, index_dir=index_dir, forbidden_titles=forbidden_titles,
                                words_per_passage=words_per_passage, **options)

    @classmethod
    def build(
        cls,
        corpus: str | Sequence[str] | Iterable[dict],
        index_dir: str,
        words_per_passage: int = WORDS_PER_PASSAGE,
        forbidden_titles: Iterable[str] = (),
        *,
        show_progress: bool = True,
        **options: Any,
    ) -> "LocalIndexRetriever":
        """Index a corpus into ``index_dir`` and open it, without looking for an index already there. Passages are
        numbered in corpus order (ids ``"0"``, ``"1"``...). The folder is written under a temporary name and moved into
        place when complete, so an interrupted build leaves no half-index behind; in an existing ``index_dir``, only the
        files of a whole hf-ralm index of this backend are replaced, and only when it holds nothing else (or nothing).

        Args:
            corpus: file path(s), or rows/``datasets.Dataset`` with ``id``, ``title``, ``text``.
            index_dir: the index folder.
            words_per_passage: the passage size (0 keeps the rows as they are: already passages).
            forbidden_titles: the article titles whose passages are never returned.
            show_progress: announce the build and show progress bars.
            **options: the backend's own (its ``Options``; the dense backend's ``encoder`` may also be a loaded
                [`DenseEncoder`][hf_ralm.retrieval.dense.DenseEncoder]).

        Returns:
            The backend's retriever over the new index.

        Examples:
            ```python
            BM25Retriever.build("wiki.jsonl.gz", "wiki-bm25", show_progress=False)
            DenseRetriever.build("wiki.jsonl.gz", "wiki-dense", encoder="BAAI/bge-small-en-v1.5", chunk_size=1000)
            ```
        """
        checked = cls.check_options(index_dir=index_dir, words_per_passage=words_per_passage,
                                    forbidden_titles=forbidden_titles, **options)
        return cls._build(corpus, index_dir, checked, show_progress)

    @classmethod
    def build_shared(
        cls,
        corpus: str | Sequence[str],
        index_dir: str | os.PathLike | None = None,
        *,
        shard: Shard | None = None,
        words_per_passage: int = WORDS_PER_PASSAGE,
        **options: Any,
    ) -> Any:
        """Build (or reuse) this backend's index of ``corpus`` in ``index_dir`` as one of the workers of ``shard``: what
        [`build_index`][hf_ralm.retrieval.build_index] (``hf-ralm index``) runs. Here one worker builds while the others
        wait on the folder's lock, then open its index (``build_or_load``); a backend whose workers share its build
        otherwise overrides this.

        Args:
            corpus: The corpus file(s).
            index_dir: The index folder (``None``: one in hf-ralm's cache).
            shard: This worker's part of the build (``None``: one process).
            words_per_passage: The passage size (0 keeps the corpus rows as they are).
            **options: The backend's own options (its ``Options``; ``None``: its default).

        Returns:
            An ``IndexSummary``; a backend's own shared build may say more (the dense one's ``DenseBuild``: whether it
                is complete, what this worker encoded).
        """
        built = cls.build_or_load(corpus, index_dir, words_per_passage=words_per_passage, **options)
        return IndexSummary(built.index_dir, built.index_record()["num_passages"])

    @classmethod
    def _open(cls, options: IndexOptions) -> "LocalIndexRetriever":
        """The template: the folder, then either the index opened (no corpus), or, under the folder's build lock,
        reused or (re)built from the corpus."""
        if options.index_dir is None:
            index_dir = default_index_dir(cls.name, options.corpus, options.words_per_passage)
        else:
            index_dir = str(options.index_dir)
        if options.corpus is None:  # opening only
            return cls._load(index_dir, options)
        with building(index_dir):
            return cls._build_or_reuse(index_dir, options)

    @classmethod
    def _build_or_reuse(cls, index_dir: str, options: IndexOptions) -> "LocalIndexRetriever":
        """Reuse ``index_dir`` if it holds a whole index of this backend built from the same corpus files with the
        settings ``options`` ask for (``_index_wanted``), otherwise (re)build it there (``build``; a usable index of
        other files or settings is replaced, with a logged warning when it was damaged or older). Another backend's
        index, or a folder that is no index, is refused (``reusable_index_info``). Called with the folder's build lock
        held."""
        paths = corpus_files(options.corpus)
        info = reusable_index_info(index_dir, cls.name, cls.index_files, cls.index_keys, cls.index_settings)
        options, wanted = cls._index_wanted(info, options)
        if index_matches(info, paths, options.words_per_passage, wanted):
            # a large index opens in seconds, its forbidden titles masked over every passage: said, not silent
            logger.info("hf-ralm: loading the %s index in %s (%s passages)", cls.name, index_dir,
                        f"{info['num_passages']:,}" if isinstance(info.get("num_passages"), int) else "its")
            return cls._load(index_dir, options)
        build_options = {field.name: getattr(options, field.name) for field in dataclasses.fields(options)
                         if field.name not in ("corpus", "index_dir")}
        return cls.build(paths, index_dir, **build_options)  # through build: what a backend (or a test) wraps

    @classmethod
    def _index_wanted(cls, info: dict | None, options: IndexOptions) -> tuple[IndexOptions, Mapping[str, Any] | None]:
        """``options`` completed from the whole index already in the folder (its ``hf_ralm_index.json``, ``info``;
        ``None`` when there is none), and the settings that index must record to be reused with them (besides its corpus
        fingerprint). Default: ``options`` as they are, and ``index_settings``."""
        return options, cls.index_settings

    @classmethod
    def _build(cls, corpus: str | Sequence[str] | Iterable[dict], index_dir: str, options: IndexOptions,
               show_progress: bool = True) -> "LocalIndexRetriever":
        """Build the index of ``corpus`` into ``index_dir`` (announced when ``show_progress``), through a temporary
        folder that ``new_build`` removes if the build fails and ``finish_build`` moves into place, then open it. The
        backend writes its files (``_write_index``); one with a build of its own overrides this."""
        paths, articles = corpus_paths_and_articles(corpus, show_progress,
                                                    build_pace(cls.name) if show_progress else None)
        if show_progress:
            announce_build(cls.name, paths, index_dir)
        with new_build(index_dir, cls.name) as tmp_dir:
            passages = passage_rows(articles, options.words_per_passage)
            num_passages, settings = cls._write_index(tmp_dir, passages, paths, options, show_progress)
            finish_build(tmp_dir, index_dir, cls.name, paths, options.words_per_passage, num_passages=num_passages,
                         settings=settings)
        return cls._load(index_dir, options)

    @classmethod
    def _write_index(cls, tmp_dir: str, passages: Iterator[dict], paths: Sequence[str] | None,
                     options: IndexOptions, show_progress: bool) -> tuple[int, dict]:
        """Write the backend's index files into the build folder ``tmp_dir`` from the ``passages`` (rows with ``id``,
        ``title``, ``text``, read once, in corpus order: a passage's id is its row number) of the corpus files ``paths``
        (``None`` for rows); return the number of passages and the settings ``hf_ralm_index.json`` records (what
        ``index_settings`` checks). Raise [`CorpusError`][hf_ralm.errors.CorpusError] for a corpus without passages
        (``check_passage_count``) before writing much."""
        raise NotImplementedError(f"The {cls.name} retriever writes no index of its own: open it with build_or_load.")

    @classmethod
    def _load(cls, index_dir: str, options: IndexOptions) -> "LocalIndexRetriever":
        """The backend's retriever over the index in ``index_dir`` (checked when opened: ``check_index``, which says how
        to build a missing or unusable one)."""
        raise NotImplementedError(f"{cls.__name__} must define _load(index_dir, options).")

    def index_record(self) -> dict[str, Any]:
        """The index folder's ``hf_ralm_index.json`` (``{}`` for a folder without one: a Lucene index from
        elsewhere, a pyserini prebuilt index), read now."""
        return read_index_info(self.index_dir) or {}

    def config(self) -> dict:
        """What ``from_config`` rebuilds this retriever from (the index folder as an absolute path)."""
        return {
            "type": self.name,
            "index_dir": os.path.abspath(self.index_dir),
            "forbidden_titles": sorted(self.forbidden_titles),
        }

    @classmethod
    def _saved_settings(cls, settings: dict, folder: str, config_file: str, overrides: dict) -> dict:
        """``settings`` read from ``config_file`` in the saved (or downloaded) ``folder``, with the index folder they
        record joined to ``folder`` unless ``overrides`` give one: a path that leads outside ``folder`` is refused (a
        folder from elsewhere must not make hf-ralm open, build or delete an index elsewhere), but for the index this
        folder was saved with on this machine, opened there and never built there (``saved_index_dir``), and so is a
        missing index unless ``corpus`` rebuilds it. A backend that reads other paths from a saved folder checks them
        here too."""
        if "index_dir" not in settings or "index_dir" in overrides:
            return settings
        recorded = settings["index_dir"]
        where = os.path.normpath(os.path.join(folder, recorded))
        index_dir = saved_index_dir(
            recorded, settings.get(SAVED_INDEX_IDENTITY), folder, config_file,
            f"give the index folder yourself ({setting('index_dir')}={where!r}) to use it, or save the retriever with "
            "save_pretrained(dir, save_index=True) so that its index travels inside the folder.",
            may_follow="corpus" not in overrides and not settings.get("corpus"))  # a corpus would build there
        if "corpus" not in overrides and not os.path.exists(index_dir):
            raise FileNotFoundError(
                f"The {cls.name} retriever saved in {folder!r} uses the index {index_dir!r}, which does not exist "
                "here. Save it with save_pretrained(dir, save_index=True) to keep the index inside the saved folder, "
                "or give the index folder (index_dir=) or the corpus to rebuild it (corpus=)."
            )
        return {**settings, "index_dir": index_dir}

    def _saved_config(self, save_directory: str, index_copy: str | None) -> dict:
        """``config`` as saved in ``save_directory``: the index first copied to ``save_directory/index_copy`` when that
        is given, its folder recorded relative to ``save_directory`` when inside it (by its absolute path and identity
        otherwise)."""
        index_dir = self.index_dir
        if index_copy is not None:
            index_dir = copy_index(index_dir, os.path.join(save_directory, index_copy))
        return {**self.config(), **recorded_index_dir(index_dir, save_directory)}
