"""A retriever backend from outside hf-ralm is one class and one register line: ``word-overlap``, defined here (exact
word-overlap scoring over a small corpus, with a local index), declares its own default query length and its own
build option, and nothing in hf_ralm is edited for it.

* ``hf-ralm index`` offers its build option as a flag (``--min-word-length``, in ``--help`` under its name) and
  builds it, as :func:`~hf_ralm.retrieval.build_index` does; a flag of another backend's build is refused.
* ``RetrievalAugmentedModel.from_pretrained(retriever="word-overlap")`` opens it by name with its query length
  (``query_length=None`` means its 12 tokens: the queries it gets are the last 12 tokens of each window's prefix);
  ``evaluate_perplexity``, ``save_pretrained`` / ``from_pretrained``, ``eval-lm --retriever word-overlap`` and
  ``generate --retriever word-overlap`` run on it.
* hf-ralm's own backends declare in their registry line what their classes declare.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import pytest

from conftest import ARTICLES, EVAL_TEXT, ON_TEST_DEVICE, TEST_DEVICE_ARGS, write_jsonl
from hf_ralm import RalmConfig, RetrievalAugmentedModel, default_query_length, prepare
from hf_ralm.cli import main
from hf_ralm.core.passages import Passage
from hf_ralm.retrieval import (
    IndexOptions,
    IndexSummary,
    LocalIndexRetriever,
    build_index,
    index_flag,
    load_retriever_from_pretrained,
    read_index_info,
    register_retriever,
    retriever_class,
    retriever_declaration,
)
from hf_ralm.retrieval.registry import RETRIEVER_NAMES, declaration_of

QUERY_LENGTH = 12
"""The stand-in's default query length: neither the sparse 32 nor the dense 64."""
SETTINGS = {"max_length": 16, "retrieval_stride": 4, "max_doc_tokens": 8, **ON_TEST_DEVICE}
FLAGS = ["--max-length", "16", "--stride", "4", "--max-doc-tokens", "8", *TEST_DEVICE_ARGS]


def words(text: str, min_length: int) -> set[str]:
    return {word for word in re.findall(r"\w+", text.lower()) if len(word) >= min_length}


@dataclass(frozen=True)
class WordOverlapOptions(IndexOptions):
    """Its options; the one declared with ``index_flag`` is a flag of ``hf-ralm index``."""

    min_word_length: int = index_flag(1, help="the shortest word the word-overlap index keeps (default 1)")


class WordOverlapRetriever(LocalIndexRetriever):
    """A passage's score is the number of distinct words (of at least ``min_word_length`` letters) it shares with the
    query; ties by passage id, no passage that shares none."""

    name = "word-overlap"
    Options = WordOverlapOptions
    BuildOptions = WordOverlapOptions
    default_query_length = QUERY_LENGTH
    index_files = ("words.json",)
    queries: list[str] = []  # every query any instance was asked, in order

    def __init__(self, index_dir, forbidden_titles=frozenset()):
        self.index_dir, self.forbidden_titles = index_dir, frozenset(forbidden_titles)
        self.min_word_length = read_index_info(index_dir)["min_word_length"]
        with open(os.path.join(index_dir, "words.json"), encoding="utf-8") as f:
            self.rows = json.load(f)

    @classmethod
    def _write_index(cls, tmp_dir, passages, paths, options, show_progress):
        rows = [{"title": row["title"], "text": row["text"],
                 "words": sorted(words(row["text"], options.min_word_length))} for row in passages]
        with open(os.path.join(tmp_dir, "words.json"), "w", encoding="utf-8") as f:
            json.dump(rows, f)
        return len(rows), {"min_word_length": options.min_word_length}

    @classmethod
    def _index_wanted(cls, info, options):
        return options, {"min_word_length": options.min_word_length}

    @classmethod
    def _load(cls, index_dir, options):
        return cls(index_dir, options.forbidden_titles)

    def retrieve(self, queries, k=1):
        WordOverlapRetriever.queries.extend(queries)
        found = []
        for query in queries:
            asked = words(query, self.min_word_length)
            scored = [(len(asked & set(row["words"])), i) for i, row in enumerate(self.rows)
                      if row["title"] not in self.forbidden_titles]
            best = sorted((hit for hit in scored if hit[0] > 0), key=lambda hit: (-hit[0], hit[1]))[:k]
            found.append([Passage(str(i), self.rows[i]["title"], self.rows[i]["text"], float(score))
                          for score, i in best])
        return found


@pytest.fixture()
def word_overlap(retriever_registry):
    """The stand-in registered for one test (its one register line)."""
    WordOverlapRetriever.queries = []
    return register_retriever(WordOverlapRetriever)


@pytest.fixture()
def corpus(tmp_path):
    return str(write_jsonl(tmp_path / "corpus.jsonl", ARTICLES))


def index(tmp_path, corpus, capsys, *extra: str) -> dict:
    """``hf-ralm index --retriever word-overlap`` into ``tmp_path/index``: what it printed."""
    main(["index", "--retriever", "word-overlap", "--corpus", corpus, "--index-dir", str(tmp_path / "index"), *extra])
    return json.loads(capsys.readouterr().out)


def command_help(command: str, capsys) -> str:
    """``hf-ralm COMMAND --help``, its whitespace made single spaces."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())


def expected_queries(tokenizer, query_length: int) -> list[str]:
    """The queries of the evaluation's windows with the query length ``query_length``."""
    plan = prepare(EVAL_TEXT, tokenizer, RalmConfig(query_length=query_length, retrieval_stride=4), max_length=16)
    return [query for query in plan.queries if query is not None]


def test_its_build_option_is_an_index_flag_and_its_query_length_the_default(word_overlap, monkeypatch, capsys):
    assert default_query_length("word-overlap") == QUERY_LENGTH == RalmConfig().query_length_for(WordOverlapRetriever)
    assert retriever_declaration("word-overlap").build_options is WordOverlapOptions
    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag: argparse wraps at the terminal's width
    shown = {command: command_help(command, capsys) for command in ("index", "eval-lm")}
    assert "--retriever {bm25,lucene,dense,hybrid,word-overlap}" in shown["index"]
    assert ("word-overlap index options: --min-word-length MIN_WORD_LENGTH the shortest word the word-overlap index "
            "keeps (default 1)") in shown["index"]
    assert "--retriever {none,bm25,lucene,dense,hybrid,word-overlap}" in shown["eval-lm"]
    assert ("(default: the retriever's own: 32 for bm25 and lucene, 64 for dense and hybrid, 12 for word-overlap; 32 "
            "without retrieval)") in shown["eval-lm"]


def test_it_is_built_saved_loaded_and_evaluated_by_name(word_overlap, tiny_model_dir, tiny_tokenizer, corpus, tmp_path,
                                                        capsys):
    built = index(tmp_path, corpus, capsys, "--min-word-length", "3")
    info = read_index_info(str(tmp_path / "index"))
    assert built == {"index_dir": str(tmp_path / "index"), "num_passages": info["num_passages"]}
    assert info["retriever"] == "word-overlap" and info["min_word_length"] == 3
    with pytest.raises(SystemExit) as end:  # another backend's build option is no option of this one's
        main(["index", "--retriever", "word-overlap", "--corpus", corpus, "--encoder", "me/encoder"])
    assert end.value.code == 2 and capsys.readouterr().err.splitlines()[-1] == (
        "hf-ralm: error: --encoder: an option of the dense and hybrid index, not of --retriever word-overlap's: drop "
        "it, or give that --retriever.")
    again = build_index("word-overlap", corpus, str(tmp_path / "index"), min_word_length=3)  # the library's entry
    assert again == IndexSummary(str(tmp_path / "index"), info["num_passages"])
    assert read_index_info(str(tmp_path / "index"))["files"] == info["files"]  # reused, not rebuilt

    model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="word-overlap",
                                                    retriever_options={"index_dir": str(tmp_path / "index")},
                                                    **SETTINGS)
    assert isinstance(model.retriever, WordOverlapRetriever) and model.retriever.min_word_length == 3
    assert model.config.query_length == QUERY_LENGTH  # the backend's default, not the sparse 32
    first = model.evaluate_perplexity(EVAL_TEXT, show_progress=False, output_dir=str(tmp_path / "run"))
    assert WordOverlapRetriever.queries == expected_queries(tiny_tokenizer, QUERY_LENGTH)
    assert expected_queries(tiny_tokenizer, QUERY_LENGTH) != expected_queries(tiny_tokenizer, 32)  # a real check
    assert first.retrieval_settings["retriever"]["retriever"] == "word-overlap"
    assert any(window for window in first.in_context())  # some windows got a passage

    model.save_pretrained(tmp_path / "saved", save_index=True)
    saved = json.loads((tmp_path / "saved" / "retriever_config.json").read_text())
    assert saved["type"] == "word-overlap" and saved["index_dir"] == "index"
    assert load_retriever_from_pretrained(str(tmp_path / "saved")).min_word_length == 3
    reloaded = RetrievalAugmentedModel.from_pretrained(str(tmp_path / "saved"), **ON_TEST_DEVICE)
    assert isinstance(reloaded.retriever, WordOverlapRetriever)
    assert reloaded.retriever.index_dir == os.path.join(str(tmp_path / "saved"), "index")
    assert reloaded.config.query_length == QUERY_LENGTH
    fresh = reloaded.evaluate_perplexity(EVAL_TEXT, show_progress=False, output_dir=str(tmp_path / "run-saved"))
    assert fresh.figures["token_ppl"] == first.figures["token_ppl"]

    data = write_jsonl(tmp_path / "data.jsonl", [{"text": EVAL_TEXT}])
    main(["eval-lm", "--model", str(tiny_model_dir), "--dataset-path", str(data), "--retriever", "word-overlap",
          "--index-dir", str(tmp_path / "index"), *FLAGS, "--output-dir", str(tmp_path / "cli")])
    capsys.readouterr()
    figures = json.loads((tmp_path / "cli" / "eval.json").read_text())
    assert figures["args"]["query_length"] == QUERY_LENGTH  # --query-length not given: the backend's default
    assert figures["token_ppl"] == pytest.approx(first.figures["token_ppl"], rel=1e-6)


def test_generate_retrieves_with_it_by_name(word_overlap, tiny_model_dir, tiny_tokenizer, corpus, tmp_path, capsys):
    index(tmp_path, corpus, capsys)
    prompts = ["the emperor of rome and the senate", "the sailor took the boat to the island and the"]
    out_json = tmp_path / "generated.json"
    main(["generate", "--model", str(tiny_model_dir), "--retriever", "word-overlap", "--index-dir",
          str(tmp_path / "index"), *TEST_DEVICE_ARGS, "--stride", "4", "--max-length", "48", "--max-doc-tokens", "32",
          "--max-new-tokens", "16", "--prompt", prompts[0], "--prompt", prompts[1], "--output-json", str(out_json)])
    capsys.readouterr()
    retriever = WordOverlapRetriever(str(tmp_path / "index"))
    strides = 0
    for record in json.loads(out_json.read_text()):
        # replay the strides: the query is the decoded last 12 tokens (the backend's default) of prompt + output
        x = record["prompt_ids"] + record["output_ids"]
        expected = []
        for start in range(0, len(record["output_ids"]), 4):
            query = tiny_tokenizer.decode(x[: len(record["prompt_ids"]) + start][-QUERY_LENGTH:])
            found = retriever.retrieve([query], k=1)[0]
            expected += [(start, found[0].id, found[0].score)] if found else []
            strides += 1
        assert [(source["start"], source["id"], source["score"]) for source in record["sources"]] == expected
        assert expected  # passages were put in context
    assert strides > 2


def test_a_backends_declarations_are_checked_when_it_is_registered(retriever_registry):
    class NoCount(WordOverlapRetriever):
        name = "no-count"
        default_query_length = 0

    with pytest.raises(ValueError, match="^The no-count retriever's default_query_length must be a whole number of "
                                         "tokens, at least 1, got 0"):
        register_retriever(NoCount)

    @dataclass(frozen=True)
    class Elsewhere:
        stem: bool = index_flag(False, help="stem the words")

    class NotAnOption(WordOverlapRetriever):
        name = "not-an-option"
        BuildOptions = Elsewhere

    with pytest.raises(ValueError, match="NotAnOption's build option 'stem' is no option of its Options"):
        register_retriever(NotAnOption)

    @dataclass(frozen=True)
    class OtherEncoder(WordOverlapOptions):
        encoder: str | None = index_flag(help="another encoder")

    class Clashing(WordOverlapRetriever):
        name = "clashing"
        Options = BuildOptions = OtherEncoder

    with pytest.raises(ValueError, match="Clashing's build option 'encoder' would be hf-ralm index's --encoder, "
                                         "which another retriever declares otherwise"):
        register_retriever(Clashing)
    with pytest.raises(ValueError, match="Unknown retriever 'clashing', so it has no default query length"):
        default_query_length("clashing")  # nothing of a refused backend is kept


@pytest.mark.parametrize("name", RETRIEVER_NAMES[1:])
def test_hf_ralms_own_backends_declare_in_their_registry_line_what_their_class_declares(name):
    """The line is what the settings and --help read without importing the backend; the class is what runs."""
    assert retriever_declaration(name) == declaration_of(retriever_class(name))
