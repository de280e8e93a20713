"""The predictive reranker's training data and its two commands, on the tiny model and a tiny corpus:

* each record's target and ranking NLLs are the reader's summed NLLs of the window's next stride and of the s'
  tokens before it, with each candidate (and no passage) written over the window's first positions, from a plain
  full forward; its texts come back from the articles, the index and the tokenizer;
* an article's own passages are never among its candidates, and the candidates are exactly the top-k others;
* an interrupted collection, resumed, gives the records of an uninterrupted one, also from a copy of the folder made
  elsewhere (a fresh clone); other settings are refused;
* two builds of an index from one corpus give the same passage ids;
* ``hf-ralm rerank-data`` → ``hf-ralm train-reranker`` → ``hf-ralm eval-lm --rerank predictive`` end to end.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import ARTICLES, EVAL_TEXT, REPO_ROOT, TEST_DEVICE_ARGS, crashed_chunk, write_jsonl
from hf_ralm import RalmConfig, RunOptions
from hf_ralm.cli import main
from hf_ralm.errors import SettingError
from hf_ralm.reranker_training import collect_rerank_data, load_rerank_data
from hf_ralm.reranker_training.collect import retrieve_excluding_title, spread_windows
from hf_ralm.reranker_training.data import read_rerank_records, rerank_data_summary
from hf_ralm.config.settings import RALM_FIELDS
from hf_ralm.selection.rules import rank_correlation
from hf_ralm.selection.rules import ranking_span
from hf_ralm.retrieval.analysis import ANALYSIS
from hf_ralm.core.passages import Passage
from hf_ralm.retrieval.bm25 import BM25Retriever
from hf_ralm.testing import full_nlls
from hf_ralm.core.windows import place_passage, plan_windows
from test_predictive_reranker import tiny_init  # noqa: F401 - a fixture: the tiny cross-encoder to start from

# Articles mixing two topics, so that a window's query finds passages of other articles too.
MIXES = [{"id": f"m{i}", "title": f"{a['title']} and {b['title']}",
          "text": " ".join(a["text"].split()[:20] + b["text"].split()[-20:])}
         for i, (a, b) in enumerate(zip(ARTICLES, ARTICLES[1:] + ARTICLES[:1]))]
CORPUS = ARTICLES + MIXES
SETTINGS = {"max_length": 16, "retrieval_stride": 4, "query_length": 8, "max_doc_tokens": 8, "rerank_candidates": 3}
WINDOWS_PER_ARTICLE = 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerank-data")
    corpus = write_jsonl(root / "corpus.jsonl", CORPUS)
    retriever = BM25Retriever.build(str(corpus), str(root / "index"), show_progress=False)
    return {"root": root, "corpus": str(corpus), "index": str(root / "index"), "retriever": retriever,
            "config": RalmConfig(**SETTINGS)}


def collect(setup, tiny_llama, tiny_tokenizer, folder: Path, **options) -> dict:
    options = {"windows_per_article": WINDOWS_PER_ARTICLE, "chunk_size": 3, "show_progress": False, **options}
    config = options.pop("config", setup["config"])
    run, options = RunOptions.split(options)
    return collect_rerank_data(tiny_llama, tiny_tokenizer, setup["retriever"], ARTICLES, config, output_dir=folder,
                               run=run,
                               **options)


def texts(setup, tokenizer, folder: Path) -> list[dict]:
    return load_rerank_data(folder, articles=setup["corpus"], tokenizer=tokenizer)[0].to_list()


@pytest.fixture(scope="module")
def collected(setup, tiny_llama, tiny_tokenizer):
    folder = setup["root"] / "uninterrupted"
    summary = collect(setup, tiny_llama, tiny_tokenizer, folder)
    records, metadata, reproduce = read_rerank_records(folder)
    return {"summary": summary, "records": records, "rows": texts(setup, tiny_tokenizer, folder),
            "metadata": metadata, "reproduce": reproduce, "folder": folder}


def test_nlls_are_the_readers_from_a_plain_forward(collected, setup, tiny_llama, tiny_tokenizer):
    records, rows = collected["records"], collected["rows"]
    assert collected["summary"]["rows_total"] == len(records) == len(rows) >= 10
    assert sum(len(r["passage_ids"]) for r in records) > len(records)  # several candidates in most windows
    by_id = {article["id"]: article for article in ARTICLES}
    for record, row in zip(records, rows):
        article = by_id[record["article"]]
        ids = tiny_tokenizer(article["text"], add_special_tokens=False)["input_ids"]
        windows = plan_windows(len(ids), SETTINGS["max_length"], SETTINGS["retrieval_stride"])
        assert record["window"] in spread_windows(len(windows), WINDOWS_PER_ARTICLE)
        w = windows[record["window"]]
        assert record["query"] == [w.prev_end - SETTINGS["query_length"], w.prev_end]
        assert row["prefix"] == tiny_tokenizer.decode(ids[w.prev_end - SETTINGS["query_length"] : w.prev_end])
        assert (row["article"], row["window"]) == (record["article"], record["window"])
        assert record["retrieval_scores"] == sorted(record["retrieval_scores"], reverse=True)
        assert row["retrieval_scores"] == record["retrieval_scores"]
        text = ids[w.begin : w.end]
        begin = ranking_span(w, 16)[0]
        targets, ranking = [], []
        for candidate in row["candidates"] + [None]:  # no passage last
            passage = [] if candidate is None else \
                tiny_tokenizer.encode(candidate, max_length=SETTINGS["max_doc_tokens"], truncation=True)
            nlls = full_nlls(tiny_llama, place_passage(text, passage), text)
            targets.append(float(nlls[w.score_begin - w.begin - 1 :].sum()))
            ranking.append(float(nlls[begin - w.begin - 1 : w.score_begin - w.begin - 1].sum()))
        assert record["target_nlls"] == pytest.approx(targets, abs=1e-4)
        assert record["ranking_nlls"] == pytest.approx(ranking, abs=1e-4)
        assert row["target_logprobs"] + [row["no_passage_logprob"]] == pytest.approx([-t for t in targets], abs=1e-4)
    # records follow the articles' order, then the windows'
    order = [article["id"] for article in ARTICLES]
    keys = [(order.index(r["article"]), r["window"]) for r in records]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    metadata = collected["metadata"]
    # the run's identity (every RALM setting of the scoring pass under its own name, as every command records it),
    # the index's identity and the collection's own setting
    scoring = RalmConfig(**{**SETTINGS, "rerank": "lm", "rerank_allow_no_passage": True,
                            "rerank_no_passage_margin": 0.0})
    assert metadata == {
        "reader": "LlamaForCausalLM", "reader_class": "LlamaForCausalLM",
        "reader_parameters": metadata["reader_parameters"], "dtype": "float32",
        **{name: getattr(scoring, name) for name in RALM_FIELDS}, "window_length": 16,
        "retriever": "bm25", "corpus_fingerprint": metadata["corpus_fingerprint"],
        "forbidden_titles": metadata["forbidden_titles"], "index": metadata["index"],
        "windows_per_article": WINDOWS_PER_ARTICLE}
    assert (metadata["rerank_candidates"], metadata["retrieval_stride"], metadata["query_length"]) == (3, 4, 8)
    # the corpus fingerprint and the index's own record (analysis) identify the data; its paths and sizes do not
    assert {key: metadata["index"][key] for key in ANALYSIS} == ANALYSIS and "files" not in metadata["index"]
    assert len(metadata["corpus_fingerprint"]) == 64 and setup["index"] not in json.dumps(metadata)
    reproduce = collected["reproduce"]
    assert reproduce["index_dir"] == setup["index"] and reproduce["command"] and "git_commit" in reproduce


def test_records_hold_numbers_and_ids_only(collected):
    stored = json.dumps(collected["records"])
    for row in collected["rows"]:
        assert row["prefix"] not in stored and all(candidate not in stored for candidate in row["candidates"])
    summary = rerank_data_summary(collected["folder"])
    assert summary["windows"] == len(collected["records"])
    assert summary["articles"] == len({r["article"] for r in collected["records"]})
    assert summary["distinct_passages"] == len({i for r in collected["records"] for i in r["passage_ids"]})
    assert 0 <= summary["no_passage_best"] <= 1 and summary["seconds"] > 0
    passages = [(r["ranking_nlls"][:-1], r["target_nlls"][:-1]) for r in collected["records"]]
    best = [targets.index(min(targets)) for _, targets in passages]
    assert summary["top1_is_oracle"] == sum(b == 0 for b in best) / len(best)
    assert summary["zero_shot_is_oracle"] == sum(ranking.index(min(ranking)) == b
                                                 for (ranking, _), b in zip(passages, best)) / len(best)
    rhos = [rank_correlation(ranking, targets) for ranking, targets in passages if len(ranking) > 1]
    assert summary["ranking_target_correlation"] == pytest.approx(sum(rhos) / len(rhos), abs=1e-12)
    assert -1 <= summary["ranking_target_correlation"] <= 1
    k = max(len(r["passage_ids"]) for r in collected["records"])
    for rank in range(k):
        at_rank = [r["target_nlls"][rank] for r in collected["records"] if len(r["passage_ids"]) > rank]
        assert summary["target_nll_by_rank"][rank] == pytest.approx(sum(at_rank) / len(at_rank), abs=1e-12)
    assert len(summary["target_nll_by_rank"]) == k
    nones = [r["target_nlls"][-1] for r in collected["records"]]
    assert summary["target_nll_no_passage"] == pytest.approx(sum(nones) / len(nones), abs=1e-12)
    first = rerank_data_summary(collected["folder"], max_records=2)
    assert first["windows"] == 2 and first["articles"] == len({r["article"] for r in collected["records"][:2]})


def test_two_builds_of_an_index_give_the_same_passage_ids(setup, tmp_path):
    again = BM25Retriever.build(setup["corpus"], str(tmp_path / "index"), show_progress=False)
    queries = [article["text"][:60] for article in ARTICLES] + ["the band played a song"]
    assert again.retrieve(queries, k=5) == setup["retriever"].retrieve(queries, k=5)
    ids = [str(i) for i in range(len(again))]
    assert again.passages_by_id(ids) == setup["retriever"].passages_by_id(ids)
    found = again.retrieve(queries[:1], k=2)[0]
    assert again.passages_by_id([p.id for p in found]) == [Passage(p.id, p.title, p.text, 0.0) for p in found]
    with pytest.raises(ValueError, match=f"No passage with the id {len(again)}"):
        again.passages_by_id([str(len(again))])


def test_own_passages_are_never_candidates(collected, setup):
    retriever, k = setup["retriever"], SETTINGS["rerank_candidates"]
    titles = {article["id"]: article["title"] for article in ARTICLES}
    would_leak = 0
    for row in collected["rows"]:
        title = titles[row["article"]]
        assert not any(candidate.startswith(title + "\n") for candidate in row["candidates"])
        ranking = retriever.retrieve([row["prefix"]], k=len(retriever))[0]
        others = [f"{p.title}\n{p.text}" for p in ranking if p.title != title][:k]
        assert row["candidates"] == others  # exactly the top k of the other articles' passages
        would_leak += any(p.title == title for p in ranking[:k])
    assert would_leak > 0  # without the exclusion, some windows would have had their own article


def test_retrieval_goes_deeper_until_k_others_are_found():
    class Ranked:
        """Always the same ranking: ten passages of "Own", then three of others."""

        def __init__(self):
            self.depths = []

        def retrieve(self, queries, k=1):
            self.depths.append(k)
            ranking = [Passage(str(i), "Own", "x", 20.0 - i) for i in range(10)]
            ranking += [Passage(f"o{i}", f"Other {i}", "y", 5.0 - i) for i in range(3)]
            return [ranking[:k] for _ in queries]

    retriever = Ranked()
    found = retrieve_excluding_title(retriever, ["q1", "q2"], k=2, title="Own")
    assert [[p.title for p in pool] for pool in found] == [["Other 0", "Other 1"]] * 2
    assert retriever.depths == [4, 8, 16]
    # fewer than asked for: the retriever has no more, and what is there is all there is
    assert [p.title for p in retrieve_excluding_title(Ranked(), ["q"], k=5, title="Own")[0]] == [
        "Other 0", "Other 1", "Other 2"]


def test_resumed_collection_gives_the_uninterrupted_records(collected, setup, tiny_llama, tiny_tokenizer, tmp_path,
                                                            monkeypatch):
    folder = tmp_path / "resumed"
    first = collect(setup, tiny_llama, tiny_tokenizer, folder, max_windows=2, chunk_size=2)
    assert (first["rows_written"], first["rows_total"]) == (2, 2)
    assert len({r["article"] for r in collected["records"][:3]}) == 1  # so it stopped inside the first article
    crashed_chunk(folder, 2, 4)  # and a crash left a half-written chunk
    second = collect(setup, tiny_llama, tiny_tokenizer, folder, max_windows=7, chunk_size=2)
    assert (second["rows_resumed"], second["rows_written"]) == (2, 5)
    # a fresh clone elsewhere: the folder copied, nothing else kept; the run resumes there
    clone = tmp_path / "clone" / "results" / "resumed"
    shutil.copytree(folder, clone)
    shutil.rmtree(folder)
    third = collect(setup, tiny_llama, tiny_tokenizer, clone, chunk_size=2)
    assert (third["rows_resumed"], third["rows_total"]) == (7, len(collected["records"]))
    resumed, _, _ = read_rerank_records(clone)
    for got, want in zip(resumed, collected["records"]):
        for key in ("target_nlls", "ranking_nlls"):
            assert got[key] == pytest.approx(want[key], abs=1e-5)
        numbers = {"target_nlls": None, "ranking_nlls": None}
        assert {**got, **numbers} == {**want, **numbers}

    def no_computing(*args, **kwargs):
        raise AssertionError("a complete folder must be resumed without running the reader")

    monkeypatch.setattr("hf_ralm.reranker_training.collect.rerank_windows", no_computing)
    again = collect(setup, tiny_llama, tiny_tokenizer, clone)
    assert (again["rows_written"], again["rows_resumed"]) == (0, len(collected["records"]))


def test_two_shards_write_the_records_of_one_process(collected, setup, tiny_llama, tiny_tokenizer, tmp_path):
    """Worker 0 of 2 scores chunks 0, 2, ... of the plan, worker 1 the others: together, the one-process records."""
    folder = tmp_path / "shards"
    total = len(collected["records"])
    first = collect(setup, tiny_llama, tiny_tokenizer, folder, num_shards=2, shard_id=0)
    mine = sum(min(3, total - start) for start in range(0, total, 6))
    assert (first["complete"], first["rows_written"], first["shard"]) == (False, mine, "0 of 2 (arguments)")
    second = collect(setup, tiny_llama, tiny_tokenizer, folder, num_shards=2, shard_id=1)
    assert second["complete"] and (second["rows_written"], second["rows_total"]) == (total - mine, total)
    assert read_rerank_records(folder)[0] == collected["records"]
    assert collected["summary"]["complete"] and "shard" not in collected["summary"]


def test_the_folder_is_given_once(setup, tiny_llama, tiny_tokenizer, tmp_path):
    with pytest.raises(SettingError, match="rerank data goes to output_dir .*data.*, but run.output_dir is .*other"):
        collect(setup, tiny_llama, tiny_tokenizer, tmp_path / "data", output_dir=str(tmp_path / "other"))
    assert not (tmp_path / "data").exists() and not (tmp_path / "other").exists()


def test_a_resume_with_other_articles_is_refused(setup, tiny_llama, tiny_tokenizer, tmp_path):
    folder = tmp_path / "data"
    collect(setup, tiny_llama, tiny_tokenizer, folder, max_windows=2)
    with pytest.raises(ValueError, match="holds the record of article id 'a1', window 1 as window 0, but the given "
                                         "articles make it article id 'a5'"):
        collect_rerank_data(tiny_llama, tiny_tokenizer, setup["retriever"], ARTICLES[::-1], setup["config"],
                            output_dir=folder,
                            windows_per_article=WINDOWS_PER_ARTICLE,
                            run=RunOptions(chunk_size=3, show_progress=False))


def test_other_settings_are_refused_unless_overwriting(setup, tiny_llama, tiny_tokenizer, tmp_path):
    folder = tmp_path / "data"
    collect(setup, tiny_llama, tiny_tokenizer, folder, max_windows=2)
    other = RalmConfig(**{**SETTINGS, "retrieval_stride": 2})
    with pytest.raises(ValueError, match="'retrieval_stride': stored 4, given 2"):
        collect(setup, tiny_llama, tiny_tokenizer, folder, config=other)
    with pytest.raises(ValueError, match="'windows_per_article': stored 4, given 2"):
        collect(setup, tiny_llama, tiny_tokenizer, folder, windows_per_article=2)
    summary = collect(setup, tiny_llama, tiny_tokenizer, folder, config=other, overwrite=True, max_windows=3)
    assert (summary["rows_resumed"], summary["rows_total"]) == (0, 3)
    assert read_rerank_records(folder)[1]["retrieval_stride"] == 2


# ------------------------------------------------------------------------------------------------------------------
# The commands
# ------------------------------------------------------------------------------------------------------------------


def rerank_data_argv(setup, model_dir, output_dir, *extra) -> list[str]:
    return ["rerank-data", "--model", str(model_dir), *TEST_DEVICE_ARGS, "--retriever", "bm25", "--index-dir",
            setup["index"], "--corpus", setup["corpus"], "--articles", setup["corpus"], "--num-articles",
            str(len(ARTICLES)), "--max-length", "16", "--stride", "4", "--query-length", "8", "--max-doc-tokens", "8",
            "--rerank-candidates", "3", "--windows-per-article", "4", "--output-dir", str(output_dir), *extra]


def run(capsys, argv: list[str]) -> str:
    main(argv)
    return capsys.readouterr().out


def fail(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hf-ralm: error: ") and "Traceback" not in "\n".join(err)
    return err[-1]


def test_commands_collect_train_and_rerank(setup, tiny_model_dir, tiny_init, tmp_path, capsys):  # noqa: F811
    titles = tmp_path / "eval-titles.txt"
    titles.write_text("Rome\n")
    data = tmp_path / "data"
    printed = run(capsys, rerank_data_argv(setup, tiny_model_dir, data, "--exclude-titles", str(titles)))
    summary = json.loads(printed)
    assert len(printed.strip().splitlines()) == 1
    assert summary["output_dir"] == str(data) and summary["rows_resumed"] == 0
    dataset, metadata = load_rerank_data(data)  # the articles, index and tokenizer the run recorded
    assert dataset.num_rows == summary["rows_total"] >= 8
    assert "a1" not in dataset["article"]  # never trained on Rome ...
    assert not any(c.startswith("Rome\n") for candidates in dataset["candidates"] for c in candidates)  # nor seen
    _, _, reproduce = read_rerank_records(data)
    assert metadata["reader"] == tiny_model_dir.name and reproduce["reader_path"] == str(tiny_model_dir)
    assert reproduce["articles"] == setup["corpus"] and "rerank-data" in reproduce["command"]
    assert len(metadata["articles_fingerprint"]) == 64 and metadata["exclude_titles"].startswith("1 titles")
    other_articles = write_jsonl(tmp_path / "other.jsonl", ARTICLES[:2])
    with pytest.raises(ValueError, match="is not the articles file"):
        load_rerank_data(data, articles=other_articles)

    again = json.loads(run(capsys, rerank_data_argv(setup, tiny_model_dir, data, "--exclude-titles", str(titles))))
    assert (again["rows_resumed"], again["rows_written"]) == (summary["rows_total"], 0)
    err = fail(capsys, rerank_data_argv(setup, tiny_model_dir, data))
    assert "'--exclude-titles': stored '1 titles" in err and "overwrite" in err

    model = tmp_path / "reranker"
    figures = json.loads(run(capsys, ["train-reranker", "--data", str(data), "--init", str(tiny_init), "--output-dir",
                                      str(model), "--epochs", "1", "--batch-size", "4", "--eval-fraction", "0.25",
                                      "--no-passage-candidate", "--eval-points", "2", "--bf16",
                                      "--attention-dropout", "0"]))
    assert figures["train_windows"] + figures["eval_windows"] == dataset.num_rows
    assert figures["no_passage_candidate"] and 0 <= figures["no_passage_chosen"] <= 1
    assert json.loads((model / "eval_results.json").read_text()) == pytest.approx(figures)
    assert len(json.loads((model / "training_curve.json").read_text())) == 2
    card = (model / "README.md").read_text()
    assert "bfloat16 mixed precision, attention dropout 0.0;" in card
    # every setting the collection recorded is one row of the card's table, the corpus described by its index
    setting_rows = card.split("## Setting\n\n")[1].split("\n\n")[0].splitlines()
    assert setting_rows[:2] == ["| setting | value |", "|---|---|"]
    assert all(row.startswith("| ") and row.endswith(" |") for row in setting_rows[2:])
    assert "| passage_template | `{title}\\n{text}` |" in setting_rows
    assert any(re.fullmatch(r"\| retrieval corpus \| `bm25 index of [\d,]+ passages, corpus fingerprint "
                            r"[0-9a-f]{16}` \|", row) for row in setting_rows)
    assert any(row.startswith("| index | `retriever=bm25, ") for row in setting_rows)
    from sentence_transformers import CrossEncoder

    assert CrossEncoder(str(model)).num_labels == 1  # a plain cross-encoder folder

    rows = write_jsonl(tmp_path / "eval.jsonl", [{"text": EVAL_TEXT}])
    out = tmp_path / "eval"
    common = ["--model", str(tiny_model_dir), *TEST_DEVICE_ARGS, "--retriever", "bm25", "--index-dir", setup["index"],
              "--max-length", "16", "--stride", "4", "--query-length", "8", "--max-doc-tokens", "8",
              "--rerank", "predictive", "--reranker-model", str(model), "--rerank-candidates", "3",
              "--rerank-allow-no-passage"]
    run(capsys, ["eval-lm", *common, "--dataset-path", str(rows), "--max-eval-tokens", "40", "--output-dir", str(out)])
    report = json.loads((out / "eval.json").read_text())
    assert report["rerank"] == "predictive" and report["rerank_candidates"] == 3
    assert report["num_windows_with_passage"] > 0
    generated = run(capsys, ["generate", *common, "--prompt", "the emperor of rome and the senate ruled the city",
                             "--max-new-tokens", "8", "--show-sources"])
    assert generated.strip()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["train-reranker", "--output-dir", "out"], "--data is required"),
        (["train-reranker", "--data", "{tmp}/missing", "--output-dir", "out"], "no such folder"),
        (["train-reranker", "--data", "{tmp}", "--output-dir", "out"], "has no rerank_data.json"),
        (["train-reranker", "--data", "{tmp}", "--output-dir", "out", "--eval-fraction", "1.5"],
         "--eval-fraction must be between 0 and 1"),
        (["train-reranker", "--data", "{tmp}", "--output-dir", "out", "--batch-size", "0"],
         "--batch-size must be at least 1"),
        (["train-reranker", "--data", "{tmp}", "--output-dir", "out", "--epochs", "one"],
         "argument --epochs: invalid float value: 'one'"),
        (["rerank-data", "--model", "m", "--articles", "a.jsonl"], "--output-dir is required"),
        (["rerank-data", "--model", "m", "--articles", "{tmp}/missing.jsonl", "--output-dir", "o", "--retriever",
          "bm25"], "file not found: {tmp}/missing.jsonl"),
        (["rerank-data", "--model", "m", "--articles", "a.jsonl", "--output-dir", "o"], "give --retriever"),
        (["rerank-data", "--model", "m", "--articles", "a", "--output-dir", "o", "--windows-per-article", "0"],
         "--windows-per-article must be at least 1, got 0"),
        (["rerank-data", "--model", "m", "--articles", "a", "--output-dir", "o", "--max-windows", "-1"],
         "--max-windows must be at least 1, got -1"),
        (["rerank-data", "--model", "m", "--articles", "a", "--output-dir", "o", "--reranker-model", "r"],
         "unrecognized arguments: --reranker-model r"),
    ],
)
def test_usage_errors_end_with_one_hf_ralm_line(capsys, tmp_path, argv, message):
    err = fail(capsys, [arg.replace("{tmp}", str(tmp_path)) for arg in argv])
    assert message.replace("{tmp}", str(tmp_path)) in err


def test_a_folder_of_the_first_collections_reads_under_todays_names():
    """The committed rerank data (results/rerank-data-smollm2) was collected when rerank-data named three settings its
    own way (``k``, ``stride``, ``max_length`` for the window length): its settings read under the names every run's
    identity uses now, its values as they were."""
    folder = REPO_ROOT / "results" / "rerank-data-smollm2"
    stored = json.loads((folder / "rerank_data.json").read_text())
    records, settings, _ = read_rerank_records(folder)
    assert records and "k" in stored and "rerank_candidates" not in stored
    assert (settings["rerank_candidates"], settings["retrieval_stride"], settings["window_length"]) == (
        stored["k"], stored["stride"], stored["max_length"])
    assert not {"k", "stride", "max_length"} & set(settings)
