"""What a new user tripped on in the first minutes: each case is one clear line (or the expected behaviour), checked
through the ``hf-ralm`` command line in-process with the tiny model, and in Python where the library decides."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import warnings

import pytest
import torch

from conftest import EVAL_TEXT, ON_TEST_DEVICE, fail, pretend_cpu, write_jsonl
from hf_ralm.cli import main
from hf_ralm.errors import SettingError


def eval_lm(files, *extra: str) -> list[str]:
    return ["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "16",
            "--stride", "4", "--query-length", "8", "--max-doc-tokens", "8", *extra]


def usage_error(capsys, argv: list[str], files) -> str:
    """Run ``hf-ralm argv``, expecting one line ``hf-ralm: error: ...``, exit status 2 and nothing written; that
    line."""
    return fail(capsys, files, argv).removeprefix("hf-ralm: error: ")


def test_version(capsys):
    import transformers

    from hf_ralm import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.strip() == (f"hf-ralm {__version__} (transformers {transformers.__version__}, "
                           f"torch {torch.__version__})")


def test_flags_are_not_abbreviated(files, capsys):
    """``--strid 4`` was read as ``--stride 4``: a typo (or a flag added later) must not change what runs."""
    argv = eval_lm(files)
    argv[argv.index("--stride")] = "--strid"
    line = usage_error(capsys, argv, files)
    assert "unrecognized arguments: --strid 4" in line


def test_output_dir_that_is_a_file(files, capsys):
    afile = files["tmp"] / "afile"
    afile.write_text("not a folder")
    for output_dir in (afile, afile / "run"):
        line = usage_error(capsys, eval_lm(files, "--output-dir", str(output_dir)), files)
        assert line == (f"{afile} is a file, where --output-dir needs a folder: give the path of a new "
                        "or empty folder, where the run keeps its records and results.")
    assert afile.read_text() == "not a folder"


@pytest.mark.parametrize("device,expected", [
    ("gpu", "--device 'gpu' is not a PyTorch device name: use cuda (cuda:0, cuda:1, ...), xpu, mps or cpu"),
    ("cuda", "--device 'cuda': PyTorch sees no CUDA GPU here"),
])
def test_device_that_is_not_there(files, capsys, device, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on this CPU machine, also where CI has a GPU
    line = usage_error(capsys, eval_lm(files, "--device", device), files)
    assert expected in line
    if device == "cuda":
        assert "leave --device out to run on the CPU" in line


def test_results_are_readable_by_others(files, capsys, tmp_path):
    """eval.json and settings.json were written 0600 (tempfile's private mode): a team's shared results folder could
    not be read by the others. They get what ``open()`` gives under the umask."""
    main(eval_lm(files, "--output-dir", str(tmp_path / "run")))
    capsys.readouterr()
    umask = os.umask(0o022)
    os.umask(umask)
    for name in ("eval.json", "windows/settings.json"):
        mode = stat.S_IMODE((tmp_path / "run" / name).stat().st_mode)
        assert mode == 0o666 & ~umask, (name, oct(mode))


def test_interrupted_index_build_leaves_nothing(files, capsys, monkeypatch):
    """Ctrl-C in ``hf-ralm index`` left an empty ``<index>.tmp`` folder behind."""
    import hf_ralm.retrieval.bm25 as bm25

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bm25, "save_bm25s", interrupted)  # the last step of the build
    index = files["tmp"] / "index"
    with pytest.raises(SystemExit) as info:
        main(["index", "--corpus", files["corpus"], "--index-dir", str(index)])
    assert info.value.code == 128 + signal.SIGINT
    assert "hf-ralm: interrupted" in capsys.readouterr().err
    assert sorted(p.name for p in files["tmp"].iterdir() if "index" in p.name) == []  # no lock file either


def test_resolve_device_in_python(monkeypatch):
    from hf_ralm.core.placement import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(SettingError, match="is not a PyTorch device name"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(SettingError, match=r"this machine has 2 CUDA GPU\(s\), cuda:0 to cuda:1"):
        resolve_device("cuda:2")


def test_bfloat16_on_a_slow_cpu_runs_in_bfloat16_with_float32_products(files, capsys, monkeypatch):
    """On a CPU without bfloat16 instructions the command line's reader gets widened linear layers (the products in
    float32, rounded back): the run stays in the precision asked, with nothing to warn about."""
    import hf_ralm.utils.widened_linear as widening

    widened = []
    real = widening.widen_where_bfloat16_is_slow
    monkeypatch.setattr(widening, "widen_where_bfloat16_is_slow",
                        lambda model: widened.append(real(model)) or widened[-1])
    pretend_cpu(monkeypatch)  # an AVX2 CPU: no bfloat16 instructions
    main(eval_lm(files, "--dtype", "bfloat16", "--device", "cpu", "--max-eval-tokens", "24"))
    err = capsys.readouterr().err
    assert len(widened) == 1 and widened[0] > 0
    assert "warning" not in err and "(bfloat16)" in err  # the estimate's line: still bfloat16


def test_text_in_one_window_says_no_retrieval_happened(files, capsys, tmp_path):
    """A text that fits in the first window is scored with no retrieval: say so (stderr, the result, a Python
    warning) with how to fix it, instead of printing a perplexity as if retrieval ran."""
    short = write_jsonl(tmp_path / "short.jsonl", [{"text": "the emperor of rome"}])
    argv = eval_lm(files, "--retriever", "bm25", "--corpus", files["corpus"], "--index-dir", str(tmp_path / "idx"),
                   "--output-dir", str(tmp_path / "run"))
    argv[argv.index("--dataset-path") + 1] = str(short)
    main(argv)
    err = capsys.readouterr().err
    expected = ("no retrieval happened: the text (4 tokens) fits in one window of --max-length 16, and the first "
                "window has no earlier tokens to query with, so the figures are the model's without retrieval. Give "
                "a longer text (or more of it: --max-eval-tokens).")
    assert f"hf-ralm: warning: {expected}" in err
    report = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert report["num_retrievals"] == 0
    assert report["warnings"] == [expected.replace("--max-length", "max_length")
                                  .replace("--max-eval-tokens", "max_eval_tokens")]

    from hf_ralm import RetrievalAugmentedModel
    from hf_ralm.errors import RalmWarning

    model = RetrievalAugmentedModel.from_pretrained(files["model"], retriever="bm25", corpus=files["corpus"],
                                                    index_dir=str(tmp_path / "idx"), max_length=16, max_doc_tokens=8,
                                                    query_length=8, **ON_TEST_DEVICE)
    with pytest.warns(RalmWarning, match="no retrieval happened"):
        model.evaluate_perplexity("the emperor of rome", show_progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RalmWarning)  # a text of several windows: no warning
        model.evaluate_perplexity(EVAL_TEXT, show_progress=False)


@pytest.mark.parametrize("gate", [["--retrieval-gate", "lm", "--gate-threshold", "0"],
                                  ["--rerank", "lm", "--rerank-candidates", "2", "--rerank-allow-no-passage"]])
def test_summary_counts_agree(files, capsys, tmp_path, gate):
    """With the lm gate the summary said ``num_windows_with_passage: 32`` beside ``retrieved_fraction: 0.156``: the
    count was of windows whose retrieval found something, the fraction of windows with a passage in context. Now both
    count passages in context, and the window counts add up."""
    main(eval_lm(files, "--retriever", "bm25", "--corpus", files["corpus"], "--index-dir", str(tmp_path / "idx"),
                 "--output-dir", str(tmp_path / "run"), *gate))
    capsys.readouterr()
    report = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert report["num_windows_without_passage_chosen"] > 0  # the tiny model's choices: some windows go without
    assert report["num_windows_with_passage"] + report["num_windows_without_passage_chosen"] \
        + report["num_empty_retrievals"] == report["num_retrievals"] > 0
    assert report["retrieved_fraction"] == report["num_windows_with_passage"] / report["num_retrievals"]


def test_missing_local_files_fail_at_once(files, capsys, monkeypatch):
    """``--dataset-path nope.jsonl`` and ``--model ./nope`` went to the Hub and failed after its retries (26-50 s):
    a path that looks local and is not there fails before any lookup; a Hub failure names HF_HUB_OFFLINE=1."""
    import datasets
    import transformers

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_hub)
    argv = eval_lm(files)
    argv[argv.index("--dataset-path") + 1] = "nope.jsonl"
    line = usage_error(capsys, argv, files)
    assert "The --dataset-path 'nope.jsonl' does not exist: give a .jsonl/.jsonl.gz file" in line
    argv = eval_lm(files)
    argv[argv.index("--model") + 1] = "./nope"
    assert "The --model './nope' does not exist: give a model folder" in usage_error(capsys, argv, files)


def test_hub_failures_say_how_to_stay_offline(tmp_path, monkeypatch):
    from hf_ralm.core.data import load_dataset_text

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="Set HF_HUB_OFFLINE=1 to use only what is in the local cache"):
        load_dataset_text("someone/no-such-dataset")


def test_a_one_time_index_build_is_announced(files, capsys):
    """The build printed hundreds of progress lines with no total and no word of what it was doing."""
    index = files["tmp"] / "index"
    main(["index", "--corpus", files["corpus"], "--index-dir", str(index)])
    err = capsys.readouterr().err
    assert (f"hf-ralm: building the bm25 index of corpus.jsonl (0.0 MB) in {index} (once, under a minute on 2 CPU "
            "cores; later runs reuse it)") in err
    size = os.path.getsize(files["corpus"])
    assert re.search(rf"Reading the corpus: 100%\|[^|]*\| {size}/{size} ", err), err  # a bar with its total
    main(["index", "--corpus", files["corpus"], "--index-dir", str(index)])  # reused: nothing announced
    assert "building" not in capsys.readouterr().err


def test_the_build_estimate_scales_with_the_corpus(tmp_path, caplog):
    from hf_ralm.retrieval.index_builds import announce_build

    corpus = tmp_path / "wiki.jsonl.gz"
    with open(corpus, "wb") as f:
        f.truncate(150_000_000)  # the Wikipedia sample's size (sparse: no disk used)
    with caplog.at_level("INFO", logger="hf_ralm"):  # logged (the command line shows hf_ralm's info on stderr)
        announce_build("bm25", [str(corpus)], "wiki-bm25")
    assert caplog.messages == ["hf-ralm: building the bm25 index of wiki.jsonl.gz (150 MB) in wiki-bm25 (once, "
                               "roughly 2 minutes on 2 CPU cores; later runs reuse it)"]


def test_user_docs_cite_no_internal_issue_numbers():
    """The README and docs/ said "(issue 10)": numbers of this project's tracker, which a user cannot look up."""
    from conftest import REPO_ROOT

    for path in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")),
                 *sorted((REPO_ROOT / "src").rglob("*.py"))]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not re.search(r"\b[Ii]ssue \d+", line), f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"


def test_progress_bars_follow_the_hugging_face_switch(files, capsys):
    """hf-ralm's bars printed whatever the Hugging Face libraries' bars were set to: they now go off with
    ``transformers.utils.logging.disable_progress_bar()`` (and ``HF_HUB_DISABLE_PROGRESS_BARS=1``)."""
    from transformers.utils import logging

    from hf_ralm import RetrievalAugmentedModel

    model = RetrievalAugmentedModel.from_pretrained(files["model"], max_length=16, max_doc_tokens=8, **ON_TEST_DEVICE)
    model.evaluate_perplexity(EVAL_TEXT)
    assert "win/s" in capsys.readouterr().err  # on by default
    logging.disable_progress_bar()
    try:
        model.evaluate_perplexity(EVAL_TEXT)
        assert capsys.readouterr().err == ""
    finally:
        logging.enable_progress_bar()


def test_max_doc_tokens_is_not_refused_where_no_passage_meets_it(files, capsys, tmp_path):
    """``--retriever none --max-length 16`` was refused because a 256-token passage (the default --max-doc-tokens)
    would not fit with a stride, though no passage is ever put in. (A run with retrieval is held to the settings,
    whatever its passages' lengths: tests/test_docs_rules.py.)"""
    main(["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--stride", "4",
          "--query-length", "8", "--max-length", "16", "--output-dir", str(tmp_path / "none")])
    capsys.readouterr()
    assert json.loads((tmp_path / "none" / "eval.json").read_text())["num_retrievals"] == 0


@pytest.mark.parametrize("layout", ["save_to_disk", "dataset folder"])
def test_a_corpus_from_a_hugging_face_dataset(files, capsys, tmp_path, layout):
    """``--corpus hf:DATASET[:CONFIG]``: a corpus with id/title/text columns read through ``datasets`` (a Hub id; here
    offline, a folder saved with ``save_to_disk`` and a local dataset folder, which ``load_dataset`` reads as it reads
    a Hub repository), indexed as the same rows from a JSONL file are: same passages, same retrievals."""
    import datasets

    from conftest import ARTICLES
    from hf_ralm.retrieval.bm25 import BM25Retriever

    if layout == "save_to_disk":
        folder = tmp_path / "saved"
        datasets.Dataset.from_list(ARTICLES).save_to_disk(str(folder))
    else:
        folder = tmp_path / "repo"
        (folder / "data").mkdir(parents=True)
        write_jsonl(folder / "data" / "train.jsonl", ARTICLES)
    main(["index", "--corpus", f"hf:{folder}", "--index-dir", str(tmp_path / "from-hf")])
    assert "building the bm25 index of hf:" in capsys.readouterr().err
    main(["index", "--corpus", files["corpus"], "--index-dir", str(tmp_path / "from-file")])
    capsys.readouterr()
    from_hf, from_file = (BM25Retriever.load(str(tmp_path / name)) for name in ("from-hf", "from-file"))
    queries = ["the emperor of rome", "a storm at sea", "the king and the queen"]
    assert [[(p.id, p.title, p.text) for p in found] for found in from_hf.retrieve(queries, k=3)] == \
        [[(p.id, p.title, p.text) for p in found] for found in from_file.retrieve(queries, k=3)]
    assert BM25Retriever.build_or_load(f"hf:{folder}", str(tmp_path / "from-hf")).index_dir  # reused, not rebuilt
    assert "building" not in capsys.readouterr().err


def test_a_hub_corpus_without_text_columns_is_refused(tmp_path):
    import datasets

    from hf_ralm.errors import CorpusError
    from hf_ralm.retrieval.corpus import read_corpus

    datasets.Dataset.from_list([{"id": "1", "body": "x"}]).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(CorpusError, match=r"has columns id, body: it needs 'title' and 'text'"):
        next(read_corpus(f"hf:{tmp_path / 'd'}"))


def test_texts_and_questions_from_hugging_face_datasets(tmp_path):
    """The internet path's data, offline: WikiText-103 rows and NQ-open questions through ``datasets`` (a local
    dataset folder, read as a Hub repository is, and a folder saved with ``save_to_disk``) give what the JSONL files
    give."""
    import datasets

    from hf_ralm.core.data import load_dataset_text
    from hf_ralm.evaluation.qa import load_questions

    rows = [{"text": " = Rome = \n"}, {"text": ""}, {"text": " Rome was the city . \n"}]
    jsonl = write_jsonl(tmp_path / "rows.jsonl", rows)
    repo = tmp_path / "wikitext"
    (repo / "data").mkdir(parents=True)
    write_jsonl(repo / "data" / "test.jsonl", rows)
    joined = " = Rome = \n \n Rome was the city . \n"
    assert load_dataset_text(str(repo), None, "test") == load_dataset_text(str(jsonl)) == joined
    questions = [{"question": "who ruled rome", "answer": ["the emperor"]}, {"question": "where", "answer": ["sea"]}]
    nq = tmp_path / "nq"
    (nq / "data").mkdir(parents=True)
    write_jsonl(nq / "data" / "validation.jsonl", questions)
    saved = tmp_path / "nq-saved"
    datasets.Dataset.from_list(questions).save_to_disk(str(saved))
    expected = load_questions(str(write_jsonl(tmp_path / "q.jsonl", questions)))
    assert load_questions(str(nq)) == load_questions(str(saved)) == expected
    assert expected[0] == {"question": "who ruled rome", "answers": ["the emperor"]}
    with pytest.raises(ValueError, match=r"has the splits validation, not 'train'"):
        load_questions(str(nq), split="train")


def test_the_paper_contamination_titles_ship_with_the_package():
    from conftest import SHARED_DATA, require_shared_file
    from hf_ralm.retrieval.base import read_forbidden_titles

    packaged = read_forbidden_titles("wikitext-103")
    assert len(packaged) == 125 and "Robert Boulter" in packaged
    assert packaged == read_forbidden_titles(str(require_shared_file(SHARED_DATA / "wikitext-103" /
                                                                     "forbidden_titles.txt")))


def test_open_book_qa_can_add_the_gold_passages_to_the_corpus(files, capsys, tmp_path):
    """Open-book QA over a sample scored 0/20 unless the gold passages were in the corpus, which only a benchmark
    script knew how to do: ``--add-gold-to-corpus`` writes them beside the results and indexes them with the corpus;
    ``--use-ctxs`` on gold passages says it is the oracle setting."""
    gold = {"title": "Comet", "text": "a comet was seen through the telescope from the ship"}
    question = {"question": "what was seen through the telescope", "answers": ["a comet"], "ctxs": [gold]}
    questions = write_jsonl(tmp_path / "q.jsonl", [question])
    base = ["eval-qa", "--model", files["model"], "--questions", str(questions), "--max-new-tokens", "2"]
    retrieval = ["--retriever", "bm25", "--corpus", files["corpus"], "--num-docs", "1"]
    main([*base, *retrieval, "--index-dir", str(tmp_path / "plain"), "--output-dir", str(tmp_path / "plain-run")])
    main([*base, *retrieval, "--index-dir", str(tmp_path / "gold"), "--output-dir", str(tmp_path / "gold-run"),
          "--add-gold-to-corpus"])
    capsys.readouterr()

    def titles(run):
        with open(tmp_path / run / "predictions.jsonl") as f:
            return [json.loads(line)["titles"] for line in f]

    assert titles("plain-run") != [["Comet"]] and titles("gold-run") == [["Comet"]]
    assert json.loads((tmp_path / "gold-run" / "gold-passages.jsonl").read_text()) == {"id": "nq-gold-0-0", **gold}

    main([*base, "--use-ctxs", "--output-dir", str(tmp_path / "oracle")])
    assert "with gold passages that is the oracle setting" in capsys.readouterr().err
    line = fail(capsys, files, [*base, "--add-gold-to-corpus", "--retriever", "bm25", "--index-dir",
                                str(tmp_path / "gold")])
    assert "--add-gold-to-corpus adds the gold passages to the retrieval corpus, but it needs --corpus" in line
    # closed book with a retriever: the cause named is --num-docs 0, not flags that were given
    line = fail(capsys, files, [*base, *retrieval[:-1], "0", "--add-gold-to-corpus", "--index-dir",
                                str(tmp_path / "gold"), "--output-dir", str(tmp_path / "closed")])
    assert "but --num-docs 0 is closed book: no prompt would get a passage" in line


def test_the_plan_is_printed_and_a_run_of_hours_on_a_cpu_needs_a_flag(files, capsys, tmp_path, monkeypatch):
    """No --max-eval-tokens and no --max-length evaluated a whole dataset at the model's maximum length (weeks on a
    CPU) without a word: the plan and an estimate from one window are printed first, and a CPU run estimated beyond
    an hour is refused unless --allow-long-run."""
    import hf_ralm.evaluation.run_cost as run_cost

    main(eval_lm(files, "--output-dir", str(tmp_path / "run")))
    err = capsys.readouterr().err
    assert re.search(r"hf-ralm: \d+ tokens in \d+ windows of L=16 every 4 tokens, 0 retrievals, 1 reader input\(s\) "
                     r"per window with a passage; one window took [\d.]+ s on cpu \(float32\): roughly \d+ s in all\.",
                     err), err
    monkeypatch.setattr(run_cost, "LONG_RUN_S", 0.0)  # as if each window took hours
    line = fail(capsys, files, eval_lm(files, "--output-dir", str(files["out"])))
    assert "on this CPU" in line and "give --allow-long-run to start it anyway" in line
    main(eval_lm(files, "--output-dir", str(tmp_path / "long"), "--allow-long-run"))
    assert (tmp_path / "long" / "eval.json").is_file()


def test_a_finished_bar_prints_its_last_line_once_in_a_log():
    """In a log (stderr redirected to a file, CI) the final line of every bar appeared twice: once from the update
    that completed it, once from ``close()``."""
    import io

    from hf_ralm.utils.progress import tqdm

    log = io.StringIO()
    with tqdm(total=3, desc="Scoring", file=log, mininterval=0, miniters=1) as bar:
        for _ in range(3):
            bar.update(1)
    lines = log.getvalue().replace("\r", "\n").splitlines()
    assert sum("3/3" in line for line in lines) == 1 and any("2/3" in line for line in lines)


def test_building_from_a_missing_corpus_file_names_it(tmp_path):
    """The build's announcement and its progress bar size the corpus files first; a missing one is still reported
    by the reading, with how to give a corpus, and leaves no half-built folder."""
    from hf_ralm.retrieval.bm25 import BM25Retriever

    with pytest.raises(FileNotFoundError, match=r"Corpus file not found: '.*nope.jsonl'. Give --corpus a JSONL"):
        BM25Retriever.build(str(tmp_path / "nope.jsonl"), str(tmp_path / "index"))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_ralm_saved_from_a_local_base_model_says_where_it_loads(files, tmp_path):
    """A RALM saved from a local base model recorded that folder's path without a word: the saved folder loads only
    where that folder is. Say so, and name the base model by its Hub id when given ``base_model=``."""
    from hf_ralm import RetrievalAugmentedModel
    from hf_ralm.errors import RalmWarning

    model = RetrievalAugmentedModel.from_pretrained(files["model"], **ON_TEST_DEVICE)
    with pytest.warns(RalmWarning, match=r"names its base model by the local folder .*base_model='OWNER/NAME'"):
        model.save_pretrained(tmp_path / "local")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RalmWarning)
        model.save_pretrained(tmp_path / "hub", base_model="HuggingFaceTB/SmolLM2-135M")
    saved = json.loads((tmp_path / "hub" / "config.json").read_text())
    assert saved["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M"
    assert model.config.base_model_name_or_path == files["model"]  # the RALM itself keeps its own
