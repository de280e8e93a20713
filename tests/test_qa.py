"""Open-domain QA (the paper's §7): prompts, normalization, exact match, has_answer, the ``ralm_exact_match``
metric, and ``hf-ralm eval-qa`` end to end on a tiny model, questions file and corpus (with resuming)."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
import torch

import hf_ralm.metrics
from conftest import ARTICLES, TEST_DEVICE_ARGS, crashed_chunk, write_jsonl
from hf_ralm.cli import main
from hf_ralm.core.modeling_utils import left_pad
from hf_ralm.runs.store import RecordStore
from hf_ralm import MAX_NEW_TOKENS, RunOptions, evaluate_qa
from hf_ralm.evaluation.qa import (
    build_qa_prompt,
    exact_match,
    exact_match_score,
    first_line,
    format_passages,
    has_answer,
    load_questions,
    normalize_answer,
    normalize_question,
)

P1 = {"title": "Rome", "text": "Augustus was the first emperor."}
P2 = {"title": "Nero", "text": "Nero was an emperor of Rome."}


# ------------------------------------------------------------------------------------------------------------------
# Prompts and normalization
# ------------------------------------------------------------------------------------------------------------------


def test_prompt_closed_book():
    assert build_qa_prompt("Who was the first emperor of Rome") == (
        "Answer these questions:\nQ: who was the first emperor of Rome?\nA:"
    )


def test_prompt_one_passage():
    assert build_qa_prompt("Who was the first emperor of Rome?", [P1]) == (
        "Rome\n\nAugustus was the first emperor.\n\n"
        "Based on this text, answer these questions:\nQ: who was the first emperor of Rome?\nA:"
    )


def test_prompt_two_passages():
    assert build_qa_prompt("who was the first emperor of Rome", [P1, P2]) == (
        "Rome\n\nAugustus was the first emperor.\n\nNero\n\nNero was an emperor of Rome.\n\n"
        "Based on these texts, answer these questions:\nQ: who was the first emperor of Rome?\nA:"
    )


def test_prompt_takes_passage_objects_and_untitled_passages():
    from hf_ralm.core.passages import Passage

    assert build_qa_prompt("q", [Passage("7", "Rome", "Augustus was the first emperor.", 3.0)]) == \
        build_qa_prompt("q", [P1])
    assert format_passages([{"title": "", "text": "no title"}, {"title": None, "text": "x"}]) == "no title\n\nx"
    assert build_qa_prompt("q", []) == build_qa_prompt("q")


@pytest.mark.parametrize("question, expected", [
    ("Who got the first Nobel prize in physics", "who got the first Nobel prize in physics?"),
    ("who got the first Nobel prize in physics?", "who got the first Nobel prize in physics?"),
    ("  When is the next Deadpool movie  ", "when is the next Deadpool movie?"),
    ("NASA stands for what", "nASA stands for what?"),
    ("x", "x?"),
])
def test_normalize_question(question, expected):
    assert normalize_question(question) == expected


@pytest.mark.parametrize("text, expected", [
    ("The Beatles", "beatles"),
    ("  a   Tale of  Two Cities! ", "tale of two cities"),
    ("U.S.A.", "usa"),
    ("Theatre and an Anthem", "theatre and anthem"),  # articles only as whole words
    ("Wilhelm Conrad Röntgen", "wilhelm conrad röntgen"),
    ("the", ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("prediction, answers, expected", [
    ("The Beatles.", ["beatles"], True),
    ("beatles", "The Beatles", True),
    ("Paris", ["Lyon", "paris, "], True),
    ("Paris France", ["Paris"], False),
    ("", ["Paris"], False),
    ("May 18, 2018", ["May 18, 2018"], True),
    ("18 May 2018", ["May 18, 2018"], False),
    ("an apple", ["apple", "pear"], True),
])
def test_exact_match(prediction, answers, expected):
    assert exact_match(prediction, answers) is expected


def test_exact_match_score():
    score = exact_match_score(["the Beatles", "Paris", "x"], [["Beatles"], ["Lyon", "Marseille"], "X!"])
    assert score == {"exact_match": pytest.approx(200 / 3), "num_correct": 2, "num_examples": 3}
    with pytest.raises(ValueError, match="2 predictions but 1 references"):
        exact_match_score(["a", "b"], [["a"]])


@pytest.mark.parametrize("answers, text, expected", [
    (["rome"], "The city of Rome.", True),
    (["rome"], "Romeo and Juliet", False),  # whole words only
    (["The first emperor"], "Augustus was the first, emperor of Rome", True),
    (["emperor augustus"], "Augustus was the emperor", False),
    (["the"], "the the the", False),  # normalizes to nothing
    ("Paris", "in paris", True),
    (["Lyon", "Rome"], "x rome y", True),
    (["rome"], "", False),
])
def test_has_answer(answers, text, expected):
    assert has_answer(answers, text) is expected


def test_first_line():
    assert first_line(" Augustus\nQ: who was next?\nA: Tiberius") == "Augustus"
    assert first_line("\nAugustus") == ""
    assert first_line("  Augustus  ") == "Augustus"


def test_prompt_truncation_keeps_bos(tiny_bos_tokenizer, tiny_tokenizer):
    """QA and generation batch prompts the same way (modeling_utils.left_pad)."""
    prompt = "rome " * 20 + "emperor"
    batch = left_pad(tiny_bos_tokenizer, [prompt, "rome"], 5)
    assert batch.truncated == [True, False] and batch.lengths == [5, 2] and batch.width == 5
    rome, emperor = tiny_bos_tokenizer.convert_tokens_to_ids(["rome", "emperor"])
    assert batch.input_ids.tolist() == [[2, rome, rome, rome, emperor], [0, 0, 0, 2, rome]]  # BOS kept, left padding
    assert batch.attention_mask.tolist() == [[1] * 5, [0, 0, 0, 1, 1]]
    batch = left_pad(tiny_tokenizer, [prompt], 3)
    assert batch.input_ids.tolist() == [[rome, rome, emperor]] and batch.truncated == [True]
    assert left_pad(tiny_tokenizer, [prompt]).lengths == [21]  # no budget: whole


# ------------------------------------------------------------------------------------------------------------------
# Questions files
# ------------------------------------------------------------------------------------------------------------------


def test_load_questions(tmp_path):
    rows = [{"question": "q1", "answers": ["a1", "b1"], "ctxs": [P1]}, {"question": "q2", "answer": ["a2"]},
            {"question": "q3", "answer": "a3"}]
    for name, gz in (("q.jsonl", False), ("q.jsonl.gz", True)):
        path = write_jsonl(tmp_path / name, rows, gz=gz)
        questions = load_questions(str(path))
        assert questions == [{"question": "q1", "answers": ["a1", "b1"], "ctxs": [P1]},
                             {"question": "q2", "answers": ["a2"]}, {"question": "q3", "answers": ["a3"]}]
    assert len(load_questions(str(path), max_questions=2)) == 2
    as_json = tmp_path / "dpr.json"
    as_json.write_text(json.dumps(rows))
    assert load_questions(str(as_json)) == questions
    with pytest.raises(ValueError, match="question 1 has no 'answers'"):
        load_questions(str(write_jsonl(tmp_path / "bad.jsonl", [{"question": "q"}])))
    with pytest.raises(ValueError, match="question 2 has no 'question'"):
        load_questions(str(write_jsonl(tmp_path / "bad2.jsonl", [rows[0], {"answers": ["x"]}])))
    with pytest.raises(FileNotFoundError, match="Questions file not found"):
        load_questions(str(tmp_path / "missing.jsonl"))


# ------------------------------------------------------------------------------------------------------------------
# The evaluate metric
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    import evaluate

    monkeypatch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)
    return evaluate


def test_metric_by_path(offline, tmp_path):
    path = hf_ralm.metrics.metric_path("ralm_exact_match")
    metric = offline.load(path, cache_dir=str(tmp_path))
    assert type(metric).__name__ == "RalmExactMatch"
    result = metric.compute(predictions=["The Beatles", "Paris", "no"],
                            references=[["beatles", "the fab four"], ["Lyon"], ["No."]])
    assert result == {"exact_match": pytest.approx(200 / 3), "num_correct": 2, "num_examples": 3}
    # one gold answer per question, as plain strings
    assert metric.compute(predictions=["an apple"], references=["Apple"])["exact_match"] == 100.0
    # batches added one by one
    for prediction, answers in (("rome", ["Rome"]), ("nero", ["Augustus"])):
        metric.add_batch(predictions=[prediction], references=[answers])
    assert metric.compute()["exact_match"] == 50.0


def test_register_writes_exact_match_shim(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    assert hf_ralm.metrics.METRICS["ralm_exact_match"] == "RalmExactMatch"
    hf_ralm.metrics.register_metrics()
    code = ("from hf_ralm.metrics.ralm_exact_match.ralm_exact_match import RalmExactMatch  "
            "# noqa: F401 (shim written by hf-ralm)\n")
    folder = (tmp_path / "modules" / "evaluate_modules" / "metrics" / "evaluate-metric--ralm_exact_match" /
              hashlib.sha256(code.encode()).hexdigest())
    assert (folder / "ralm_exact_match.py").read_text() == code
    assert (folder / "__init__.py").is_file()
    namespace: dict = {}
    exec(code, namespace)
    from hf_ralm.metrics.ralm_exact_match.ralm_exact_match import RalmExactMatch

    assert namespace["RalmExactMatch"] is RalmExactMatch


def test_metric_by_bare_name(offline, monkeypatch, tmp_path):
    """``evaluate.load("ralm_exact_match")`` offline, through the shim ``import hf_ralm`` writes in evaluate's modules
    cache (written again here into this test's cache)."""
    monkeypatch.setenv("HF_MODULES_CACHE", str(offline.config.HF_MODULES_CACHE))
    hf_ralm.metrics.register_metrics()
    metric = offline.load("ralm_exact_match", cache_dir=str(tmp_path))
    assert type(metric).__name__ == "RalmExactMatch"
    assert metric.compute(predictions=["Rome"], references=[["rome", "Roma"]])["exact_match"] == 100.0


# ------------------------------------------------------------------------------------------------------------------
# hf-ralm eval-qa end to end
# ------------------------------------------------------------------------------------------------------------------

QUESTIONS = [
    {"question": "Who was the first emperor of rome", "answers": ["augustus"], "ctxs": [ARTICLES[0], ARTICLES[4]]},
    {"question": "where did the sailor take the boat?", "answer": ["the sea"], "ctxs": [ARTICLES[1]]},
    {"question": "what did the band play at the concert", "answers": ["a song", "music"],
     "ctxs": [ARTICLES[2], ARTICLES[3]]},
    {"question": "who sat on the throne in the castle", "answers": ["the king"], "ctxs": [ARTICLES[4]]},
    {"question": "what did the telescope on the ship see", "answers": ["a comet"], "ctxs": [ARTICLES[3], ARTICLES[1]]},
]


def reference_answers(model, tokenizer, questions, passages):
    """Each question answered on its own (no batching): prompt, greedy 10 tokens, first line."""
    answers = []
    for question, found in zip(questions, passages):
        prompt = build_qa_prompt(question["question"], found)
        ids = left_pad(tokenizer, [prompt], 128 - 10).input_ids
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                                 pad_token_id=0)
        answers.append(first_line(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)))
    return answers


def qa_files(tmp_path, tiny_llama, tiny_tokenizer, passages, gz=False):
    """The questions file, with the first and fourth questions answerable: their gold answers include the tiny
    model's own answer (written differently: upper case, an article, punctuation)."""
    predicted = reference_answers(tiny_llama, tiny_tokenizer, QUESTIONS, passages)
    rows = [dict(q) for q in QUESTIONS]
    for i in (0, 3):
        assert predicted[i], "the tiny model gave an empty answer"
        key = "answers" if "answers" in rows[i] else "answer"
        rows[i][key] = rows[i][key] + ["The " + predicted[i].upper() + "."]
    path = write_jsonl(tmp_path / ("questions.jsonl.gz" if gz else "questions.jsonl"), rows, gz=gz)
    return path, predicted, rows


def qa_argv(model_dir, questions, out, *extra):
    return ["eval-qa", "--model", str(model_dir), "--questions", str(questions), "--output-dir", str(out),
            *TEST_DEVICE_ARGS, "--batch-size", "2", *extra]


def read_predictions(out):
    return [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]


def check_run(out, rows, predicted, passages, capsys=None):
    records = read_predictions(out)
    report = json.loads((out / "eval.json").read_text())
    assert [r["question"] for r in records] == [q["question"] for q in rows]
    assert [r["prediction"] for r in records] == predicted
    assert [r["titles"] for r in records] == [[p["title"] for p in found] for found in passages]
    gold = [q.get("answers", q.get("answer")) for q in rows]
    assert [r["answers"] for r in records] == gold
    assert [r["em"] for r in records] == [exact_match(p, g) for p, g in zip(predicted, gold)]
    assert [r["em"] for r in records][0] and records[3]["em"]
    expected_has = [bool(found) and has_answer(g, format_passages(found)) for g, found in zip(gold, passages)]
    assert [r["has_answer"] for r in records] == expected_has
    n = len(rows)
    assert report["num_questions"] == n and report["complete"]
    assert report["num_correct"] == sum(r["em"] for r in records)
    assert report["em"] == pytest.approx(report["num_correct"] / n)  # a fraction, as eval-lm's shares
    assert report["num_has_answer"] == sum(expected_has)
    assert report["has_answer"] == pytest.approx(sum(expected_has) / n)
    assert {"load_s", "retrieval_s", "generation_s", "total_s"} <= set(report["timings"])
    assert report["args"]["questions"].endswith(("questions.jsonl", "questions.jsonl.gz"))
    return records, report


def test_eval_qa_bm25(tmp_path, tiny_model_dir, tiny_llama, tiny_tokenizer, tiny_index, capsys):
    retriever = tiny_index["retriever"]
    passages = [[p.to_dict() for p in found] for found in retriever.retrieve([q["question"] for q in QUESTIONS], k=2)]
    assert any(len(found) == 2 for found in passages)
    questions, predicted, rows = qa_files(tmp_path, tiny_llama, tiny_tokenizer, passages, gz=True)
    out = tmp_path / "bm25"
    main(qa_argv(tiny_model_dir, questions, out, "--retriever", "bm25", "--index-dir", tiny_index["index_dir"],
                 "--corpus", tiny_index["corpus"], "--num-docs", "2"))
    printed = json.loads(capsys.readouterr().out)
    records, report = check_run(out, rows, predicted, passages)
    assert {k: report[k] for k in printed} == printed
    assert report["settings"]["num_docs"] == 2 and report["settings"]["retriever"] == "bm25"
    assert records[0]["passage_ids"] == [p["id"] for p in passages[0]]
    assert report["sample_prompt"] == build_qa_prompt(QUESTIONS[0]["question"], passages[0])


def test_eval_qa_use_ctxs_and_closed_book(tmp_path, tiny_model_dir, tiny_llama, tiny_tokenizer, capsys):
    passages = [q["ctxs"][:1] for q in QUESTIONS]
    questions, predicted, rows = qa_files(tmp_path, tiny_llama, tiny_tokenizer, passages)
    out = tmp_path / "ctxs"
    main(qa_argv(tiny_model_dir, questions, out, "--use-ctxs"))  # --num-docs defaults to 1 with passages
    capsys.readouterr()
    records, report = check_run(out, rows, predicted, passages)
    assert report["settings"]["use_ctxs"] and report["settings"]["num_docs"] == 1
    assert report["has_answer"] > 0

    closed = [[] for _ in QUESTIONS]
    questions, predicted, rows = qa_files(tmp_path, tiny_llama, tiny_tokenizer, closed)
    out = tmp_path / "closed"
    main(qa_argv(tiny_model_dir, questions, out))  # no passages: closed book
    capsys.readouterr()
    records, report = check_run(out, rows, predicted, closed)
    assert report["settings"]["num_docs"] == 0 and report["has_answer"] == 0
    assert report["sample_prompt"] == build_qa_prompt(QUESTIONS[0]["question"])
    assert all(r["titles"] == [] and r["num_passages"] == 0 for r in records)


def test_evaluate_qa_takes_its_run_options(tmp_path, tiny_llama, tiny_tokenizer):
    """The Python entry: the run's options as one RunOptions; saved blocks of ``run.batch_size`` questions, unless
    ``run.chunk_size`` says otherwise."""
    passages = [q["ctxs"][:1] for q in QUESTIONS]
    predicted = reference_answers(tiny_llama, tiny_tokenizer, QUESTIONS, passages)
    examples = load_questions(str(write_jsonl(tmp_path / "questions.jsonl", QUESTIONS)))
    for chunk_size, ranges in ((None, ["0-2", "2-4", "4-5"]), (3, ["0-3", "3-5"])):
        out = tmp_path / f"chunks-{chunk_size}"
        run = RunOptions(output_dir=str(out), batch_size=2, chunk_size=chunk_size, show_progress=False)
        report = evaluate_qa(tiny_llama, tiny_tokenizer, examples, None, 1, use_ctxs=True,
                             max_new_tokens=MAX_NEW_TOKENS, max_length=128, run=run)
        assert report["complete"] and [r["prediction"] for r in read_predictions(out)] == predicted
        assert sorted(path.name for path in (out / "predictions").glob("chunk-*")) == \
            [f"chunk-{int(a):08d}-{int(b):08d}.json.gz" for a, b in (span.split("-") for span in ranges)]


def test_an_overwrite_removes_the_old_runs_results_at_once(tmp_path, tiny_llama, tiny_tokenizer):
    """A fresh run over an old one's folder: until it completes, the folder must not show the old run's figures."""
    examples = load_questions(str(write_jsonl(tmp_path / "questions.jsonl", QUESTIONS)))
    out = tmp_path / "out"
    args = (tiny_llama, tiny_tokenizer, examples, None, 1)
    options = {"use_ctxs": True, "max_new_tokens": MAX_NEW_TOKENS, "max_length": 128}
    assert evaluate_qa(*args, **options, run=RunOptions(output_dir=str(out), batch_size=2,
                                                        show_progress=False))["complete"]
    assert (out / "eval.json").is_file() and (out / "predictions.jsonl").is_file()
    # the fresh run's first worker of two: half the questions, so no results of its own yet
    partial = evaluate_qa(*args, **options, run=RunOptions(output_dir=str(out), batch_size=2, overwrite=True,
                                                           num_shards=2, shard_id=1, show_progress=False))
    assert partial["complete"] is False and not (out / "predictions.jsonl").exists()
    assert not (out / "eval.json").exists() or json.loads((out / "eval.json").read_text())["complete"] is False


def test_eval_qa_resume(tmp_path, tiny_model_dir, tiny_llama, tiny_tokenizer, capsys):
    passages = [q["ctxs"][:2] for q in QUESTIONS]
    questions, predicted, rows = qa_files(tmp_path, tiny_llama, tiny_tokenizer, passages)
    out = tmp_path / "resume"
    argv = qa_argv(tiny_model_dir, questions, out, "--use-ctxs", "--num-docs", "2")
    main(argv + ["--max-questions", "2"])
    first = json.loads(capsys.readouterr().out)
    assert first["num_questions"] == 2 and first["num_resumed"] == 0
    partial = json.loads((out / "eval.json").read_text())
    assert partial["complete"] and partial["num_answered"] == 2
    lines = (out / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 2

    # a crash in the middle of writing the next batch: its half-written chunk is dropped, the saved ones are kept
    crashed_chunk(out / "predictions", 2, 4)
    main(argv)
    second = json.loads(capsys.readouterr().out)
    assert second["num_resumed"] == 2 and second["num_questions"] == len(QUESTIONS)
    assert (out / "predictions.jsonl").read_text().splitlines()[:2] == lines
    assert not list((out / "predictions").glob(".tmp-*"))
    records, report = check_run(out, rows, predicted, passages)
    assert report["num_answered"] == len(QUESTIONS) - 2

    # everything done: nothing is generated again
    main(argv)
    third = json.loads(capsys.readouterr().out)
    assert third["num_resumed"] == len(QUESTIONS) and third == {**second, "num_resumed": len(QUESTIONS)}
    assert len(read_predictions(out)) == len(QUESTIONS)

    # other settings, or another questions file, in the same folder: refused
    err = fail(capsys, argv[:-1] + ["1"])
    assert "other settings" in err and "'--num-docs': stored 2, given 1" in err
    other = write_jsonl(tmp_path / "other.jsonl", [{"question": "something else", "answers": ["x"], "ctxs": []}])
    err = fail(capsys, qa_argv(tiny_model_dir, other, out, "--use-ctxs", "--num-docs", "2"))
    assert "another questions file" in err


def test_eval_qa_shards(tmp_path, tiny_model_dir, tiny_llama, tiny_tokenizer, capsys):
    """Two workers share a run (batches of 2: worker 0 answers questions 0, 1 and 4, worker 1 questions 2 and 3);
    the last to finish writes the results, and a run without shards, with another batch size, completes one."""
    passages = [q["ctxs"][:1] for q in QUESTIONS]
    questions, predicted, rows = qa_files(tmp_path, tiny_llama, tiny_tokenizer, passages)
    out = tmp_path / "shards"
    argv = qa_argv(tiny_model_dir, questions, out, "--use-ctxs")
    main(argv + ["--num-shards", "2", "--shard-id", "1"])
    partial = json.loads(capsys.readouterr().out)
    assert partial["complete"] is False and partial["num_answered"] == 2 and partial["shard"] == "1 of 2 (arguments)"
    assert not (out / "predictions.jsonl").exists()
    main(argv + ["--num-shards", "2", "--shard-id", "0"])
    done = json.loads(capsys.readouterr().out)
    assert done["num_questions"] == len(QUESTIONS) and done["num_resumed"] == 2
    check_run(out, rows, predicted, passages)

    # worker 1's part, then a run without shards whose one batch of 5 would cover it: it answers 0-1 and 4 only
    out = tmp_path / "merge"
    argv = qa_argv(tiny_model_dir, questions, out, "--use-ctxs")
    main(argv + ["--num-shards", "2", "--shard-id", "1"])
    capsys.readouterr()
    main(argv + ["--batch-size", "5"])
    merged = json.loads(capsys.readouterr().out)
    assert merged["num_resumed"] == 2 and merged["num_questions"] == len(QUESTIONS)
    check_run(out, rows, predicted, passages)
    assert RecordStore(out / "predictions", RecordStore.read_settings(out / "predictions")[0]).ranges() == \
        [(0, 2), (2, 4), (4, 5)]


def fail(capsys, argv) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() and "Traceback" not in err
    return err


def test_eval_qa_errors(tmp_path, tiny_model_dir, tiny_index, capsys):
    questions = write_jsonl(tmp_path / "q.jsonl", QUESTIONS[:1])
    out = str(tmp_path / "out")
    assert "--questions" in fail(capsys, ["eval-qa", "--model", str(tiny_model_dir)])
    err = fail(capsys, qa_argv(tiny_model_dir, questions, out, "--num-docs", "1"))
    assert "needs --retriever" in err and "--use-ctxs" in err
    err = fail(capsys, qa_argv(tiny_model_dir, questions, out, "--use-ctxs", "--retriever", "bm25", "--index-dir",
                               tiny_index["index_dir"]))
    assert "drop --retriever" in err
    assert "--num-docs must be at least 0" in fail(capsys, qa_argv(tiny_model_dir, questions, out, "--num-docs", "-1"))
    err = fail(capsys, qa_argv(tiny_model_dir, tmp_path / "missing.jsonl", out))
    assert "Questions file not found" in err
    no_ctxs = write_jsonl(tmp_path / "no-ctxs.jsonl", [{"question": "q", "answers": ["a"]}])
    assert "has no 'ctxs'" in fail(capsys, qa_argv(tiny_model_dir, no_ctxs, out, "--use-ctxs"))
    err = fail(capsys, qa_argv(tiny_model_dir, questions, out, "--dataset-path", str(questions)))
    assert "unrecognized arguments: --dataset-path" in err  # eval-lm's flag: eval-qa does not take it
    with gzip.open(tmp_path / "empty.jsonl.gz", "wt") as f:
        f.write("\n")
    assert "no questions" in fail(capsys, qa_argv(tiny_model_dir, tmp_path / "empty.jsonl.gz", out))
