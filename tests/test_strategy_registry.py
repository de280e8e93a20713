"""The strategy registry (:mod:`hf_ralm.selection.strategies`): a strategy registered from outside the package is a
value of ``--rerank`` everywhere at once, in ``RalmConfig``, ``eval-lm``, ``--compare`` and ``generate``, and chooses
there exactly as a plain loop over the retriever's scores does; the built-in strategies are entries of the same
table, with the costs and properties the run-cost estimate and the refusals read.

The strategy here, ``bm25-margin``: retrieval's top passage when its BM25 score beats the second's by :data:`MARGIN`,
else no passage (tiny models, real BM25 over the tiny corpus)."""

from __future__ import annotations

import json

import pytest

from conftest import EVAL_TEXT, TEST_DEVICE_ARGS, write_jsonl
from hf_ralm import RalmConfig
from hf_ralm.cli import build_parser, main
from hf_ralm.evaluation.compare import STRATEGIES as COMPARE_ROWS
from hf_ralm.errors import SettingError
from hf_ralm.core.passages import NO_PASSAGE
from hf_ralm.config import strategy_settings
from hf_ralm.config.strategy_settings import GATE, RERANK, strategy_names
from hf_ralm.selection.strategies import (
    RETRIEVAL_SCORES,
    RerankStrategy,
    check_generation,
    get_strategy,
    reader_inputs_per_window,
    reader_ranks,
    register_strategy,
)

MARGIN = 0.75  # on the tiny corpus, some windows' top two BM25 scores are closer than this and some farther apart
K = 3
SETTINGS = ["--max-length", "16", "--stride", "4", "--query-length", "8", "--max-doc-tokens", "8",
            "--rerank-candidates", str(K)]


class ScoreMargin(RerankStrategy):
    """The registered strategy: one class and its register line, nothing in hf_ralm edited."""

    name = "bm25-margin"
    help = f"the top passage when its BM25 score beats the second's by {MARGIN}, else none"
    fields = ("rerank_candidates",)
    needs = frozenset({RETRIEVAL_SCORES})

    def choose(self, candidates, config) -> int:
        scores = [passage.score for passage in candidates.passages] + [float("-inf")]
        return 0 if scores[0] - scores[1] >= MARGIN else NO_PASSAGE


def plain_choice(found) -> int:
    """The rule written out: the index of the passage put in context among ``found`` (retrieval order), -1 for none."""
    if not found:
        return -1
    return 0 if len(found) == 1 or found[0].score - found[1].score >= MARGIN else -1


@pytest.fixture()
def bm25_margin(monkeypatch):
    """``bm25-margin`` registered for one test; the table is the built-in one again afterwards."""
    monkeypatch.setattr(strategy_settings, "_STRATEGIES", dict(strategy_settings._STRATEGIES))
    return register_strategy(ScoreMargin())


def test_the_built_in_strategies_are_registry_entries():
    assert strategy_names(RERANK) == ("none", "lm", "predictive", "oracle", "random")
    assert strategy_names(GATE) == ("always", "score", "lm")
    assert list(COMPARE_ROWS) == ["none", "top1", "lm-gate", "zero-shot", "zero-shot-no-passage", "oracle", "random"]
    assert [name for name in strategy_names(RERANK) if get_strategy(RERANK, name).looks_at_future] == ["oracle"]
    # the run-cost estimate: reader inputs per window with retrieval, as each strategy declares them
    costs = {
        "none": ({}, 1),
        "lm": ({"rerank": "lm"}, 5),
        "lm + no passage": ({"rerank": "lm", "rerank_allow_no_passage": True}, 6),
        "another LM ranks": ({"rerank": "lm", "reranker_model": "x"}, 1),
        "oracle": ({"rerank": "oracle"}, 5),
        "predictive": ({"rerank": "predictive", "reranker_model": "x"}, 1),
        "random": ({"rerank": "random"}, 1),
        "lm gate": ({"retrieval_gate": "lm"}, 2),
        "lm and lm gate": ({"rerank": "lm", "retrieval_gate": "lm"}, 5),  # the reranking's count, as before
        "score gate": ({"retrieval_gate": "score", "gate_threshold": 0.3}, 1),
        "ensemble": ({"ensemble_size": 3}, 3),
    }
    for what, (settings, inputs) in costs.items():
        config = RalmConfig(rerank_candidates=5, **settings)
        assert reader_inputs_per_window(config) == inputs, what
        assert reader_ranks(config) == (what in ("lm", "lm + no passage", "oracle", "lm gate", "lm and lm gate"))
    with pytest.raises(SettingError, match="^rerank='oracle' ranks the candidates on the very tokens"):
        check_generation(RalmConfig(rerank="oracle"))


def test_a_registered_strategy_is_a_setting_everywhere(bm25_margin, monkeypatch, capsys):
    config = RalmConfig(rerank="bm25-margin", rerank_candidates=K)
    assert config.num_retrieved == K and reader_inputs_per_window(config) == 1 and not reader_ranks(config)
    check_generation(config)  # it looks at no future token
    with pytest.raises(SettingError, match=r"^rerank must be one of none, lm, predictive, oracle, random, "
                                           r"bm25-margin, got 'bm25-mragin'\.$"):
        RalmConfig(rerank="bm25-mragin")
    with pytest.raises(SettingError, match="reranker_model is the ranking model of rerank='lm' or 'predictive'; "
                                           "rerank='bm25-margin' uses none"):
        RalmConfig(rerank="bm25-margin", reranker_model="me/reranker")
    with pytest.raises(SettingError, match="ensemble_size=2 mixes the top passages"):
        RalmConfig(rerank="bm25-margin", ensemble_size=2)
    with pytest.raises(ValueError, match="registered already"):
        register_strategy(ScoreMargin())
    # the command line's choices and help, and --compare's rows, read the table when a parser is built
    assert build_parser().parse_args(["eval-lm", "--rerank", "bm25-margin"]).rerank == "bm25-margin"
    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag: argparse wraps at the terminal's width
    with pytest.raises(SystemExit):
        main(["eval-lm", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert ("--rerank {none,lm,predictive,oracle,random,bm25-margin} how each window's passage is chosen" in shown)
    assert (f"random (a floor) or bm25-margin (the top passage when its BM25 score beats the second's by {MARGIN}, "
            "else none) --rerank-candidates") in shown
    assert "none, top1, lm-gate, zero-shot, zero-shot-no-passage, oracle, random, bm25-margin, e.g." in shown
    assert list(COMPARE_ROWS)[-1] == "bm25-margin"


def test_eval_lm_and_compare_choose_as_the_plain_loop(bm25_margin, tiny_model_dir, tiny_index, tmp_path, capsys):
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": EVAL_TEXT}])
    common = ["--model", str(tiny_model_dir), "--dataset-path", str(data), "--retriever", "bm25", "--index-dir",
              tiny_index["index_dir"], *SETTINGS, *TEST_DEVICE_ARGS]
    main(["eval-lm", *common, "--rerank", "bm25-margin", "--output-dir", str(tmp_path / "run"),
          "--save-retrieval-file", str(tmp_path / "chosen.json")])
    capsys.readouterr()
    figures = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert figures["rerank"] == "bm25-margin" and figures["rerank_candidates"] == K
    assert "oracle_looks_at_future" not in figures

    # every window's choice, against the rule applied to a fresh retrieval of the window's query
    items = [item for item in json.loads((tmp_path / "chosen.json").read_text()) if item.get("retrieved_docs")]
    retriever = tiny_index["retriever"]
    expected = [plain_choice(retriever.retrieve([item["query"]], k=K)[0]) for item in items]
    assert [item["chosen"] for item in items] == expected
    assert {0, -1} <= set(expected)  # some windows kept their top passage and some went without: a real check
    assert figures["num_windows_with_passage"] == expected.count(0)

    # --compare: its row is the separate run's, from one reader pass
    main(["eval-lm", *common, "--compare", "none,top1,bm25-margin", "--output-dir", str(tmp_path / "compare")])
    assert "| bm25-margin |" in capsys.readouterr().out
    rows = {row["strategy"]: row for row in json.loads((tmp_path / "compare" / "compare.json").read_text())["rows"]}
    assert rows["bm25-margin"]["token_ppl"] == pytest.approx(figures["token_ppl"], rel=1e-6)
    assert rows["bm25-margin"]["word_ppl"] == pytest.approx(figures["word_ppl"], rel=1e-6)
    assert rows["bm25-margin"]["num_windows_with_passage"] == expected.count(0)
    assert rows["bm25-margin"]["inputs_per_window"] == 1
    assert rows["none"]["token_ppl"] != rows["bm25-margin"]["token_ppl"] != rows["top1"]["token_ppl"]


def test_generate_chooses_as_the_plain_loop(bm25_margin, tiny_model_dir, tiny_index, tiny_tokenizer, tmp_path,
                                            capsys):
    prompts = ["the emperor of rome and the senate", "the sailor took the boat to the island and the"]
    out_json = tmp_path / "generated.json"
    main(["generate", "--model", str(tiny_model_dir), "--retriever", "bm25", "--index-dir", tiny_index["index_dir"],
          *TEST_DEVICE_ARGS, "--stride", "4", "--query-length", "8", "--max-length", "48", "--max-doc-tokens", "32",
          "--max-new-tokens", "16", "--rerank", "bm25-margin", "--rerank-candidates", str(K), "--prompt", prompts[0],
          "--prompt", prompts[1], "--output-json", str(out_json)])
    capsys.readouterr()
    choices = []
    for record in json.loads(out_json.read_text()):
        # replay the strides: the query is the decoded last 8 tokens of prompt + output so far
        x = record["prompt_ids"] + record["output_ids"]
        expected = []
        for start in range(0, len(record["output_ids"]), 4):
            query = tiny_tokenizer.decode(x[: len(record["prompt_ids"]) + start][-8:])
            found = tiny_index["retriever"].retrieve([query], k=K)[0]
            choices.append(plain_choice(found))
            if choices[-1] == 0:
                expected.append((start, found[0].id, 0))
        assert [(source["start"], source["id"], source["rank"]) for source in record["sources"]] == expected
    assert {0, -1} <= set(choices)  # strides with and without a passage: the choices were compared
