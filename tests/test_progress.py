"""Progress on stderr (hf_ralm.utils.progress): no silent stage, one bar per stage, the run's bar moving, whole lines
and no cursor codes in a log, and estimates from the speed measured on this machine."""

from __future__ import annotations

import io
import re

import pytest

from conftest import EVAL_TEXT, ON_TEST_DEVICE
from hf_ralm.cli import main

CURSOR_CODES = re.compile(r"\r|\x1b")


def compare_argv(files, index_dir: str, *extra: str) -> list[str]:
    return ["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "16",
            "--stride", "4", "--query-length", "8", "--max-doc-tokens", "8", "--retriever", "bm25",
            "--corpus", files["corpus"], "--index-dir", index_dir, "--compare", "none,top1,lm-gate",
            "--batch-size", "1", "--chunk-size", "1000", *extra]  # one chunk: the run's bar moves only within it


@pytest.fixture()
def log_every_update(monkeypatch):
    """Every bar's update printed in a log (a test runs for less than the interval between a log's lines)."""
    import hf_ralm.utils.progress as progress

    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0, raising=False)


def test_a_command_writes_no_cursor_codes_to_a_log(files, capsys):
    """Written to a file, ``eval-lm --compare`` left carriage returns and the nested bars' cursor moves (ESC [A)
    between its lines; transformers' "Loading weights" bar too."""
    main(compare_argv(files, files["index"]))  # builds the index, then loads it, times, retrieves, scores
    err = capsys.readouterr().err
    assert "Reading the corpus" in err and "Scoring candidates" in err
    assert not CURSOR_CODES.search(err), repr(CURSOR_CODES.search(err).group())
    assert all(line.strip() for line in err.splitlines()), "a blank line in the log"


def test_the_run_bar_moves_while_a_chunk_is_scored_and_no_bar_is_nested(files, capsys, log_every_update):
    """In --compare's pass the run's bar "Scoring candidates" stood at 0/65 while a nested "Reranking (lm)" bar
    moved under it: the chunk's reranking now advances the run's bar, batch by batch, and shows no bar of its
    own."""
    main(compare_argv(files, files["index"]))
    err = capsys.readouterr().err
    counts = [tuple(map(int, m.groups())) for m in re.finditer(r"Scoring candidates:.*?\| (\d+)/(\d+) ", err)]
    total = counts[-1][1]
    assert counts[-1] == (total, total) and total > 2, counts
    assert any(0 < done < total for done, _ in counts), f"the run's bar did not move within its chunk: {counts}"
    assert "Reranking" not in err, err  # one bar per stage


def test_the_stages_after_the_model_loads_report(files, capsys, log_every_update):
    """Between "Loading weights" and the run's estimate the command said nothing for two minutes: loading the
    index, timing the windows and each chunk's retrieval now each print a line."""
    main(["index", "--corpus", files["corpus"], "--index-dir", files["index"]])
    capsys.readouterr()
    main(compare_argv(files, files["index"]))
    err = capsys.readouterr().err
    assert f"hf-ralm: loading the bm25 index in {files['index']} (" in err
    assert re.search(r"Timing the run's windows: 100%.*\| (\d+)/\1 ", err), err
    assert re.search(r"Scoring candidates:.*\| 0/\d+ .*Retrieving\]", err), err  # the chunk's retrieval, named
    assert err.index("loading the bm25 index") < err.index("Timing") < err.index("Scoring candidates")


def test_a_bar_in_a_log_prints_whole_lines_at_an_interval():
    """A bar on a stream that is no terminal: a line when it starts, none within the interval, its last line once
    at the end."""
    from hf_ralm.utils.progress import tqdm

    log = io.StringIO()
    with tqdm(total=100, desc="Scoring", unit="win", file=log) as bar:
        for _ in range(100):
            bar.update(1)
    lines = log.getvalue().splitlines()
    assert not CURSOR_CODES.search(log.getvalue())
    assert len(lines) == 2 and "0/100" in lines[0] and "100/100" in lines[1], lines


def test_a_bar_in_a_share_advances_the_outer_bar():
    from hf_ralm.utils.progress import tqdm

    log = io.StringIO()
    run = tqdm(total=10, desc="Scoring candidates", unit="win", file=log, mininterval=0)
    with run.share(6):
        with tqdm(total=2, desc="Retrieving", unit="query") as retrieving:
            retrieving.update(2)
            assert run.postfix == "Retrieving" and run.n == 0  # another unit: named on the run's line
        with tqdm(total=6, desc="Reranking (lm)", unit="win", file=log) as chunk:
            chunk.update(4)
            assert run.n == 4
            chunk.update(9)  # never past the share
            assert run.n == 6
    with run.share(4):
        pass
    assert run.n == 10 and not run.postfix
    run.close()
    assert "Reranking" not in log.getvalue() and "Retrieving]" in log.getvalue()


def test_pace_extrapolates_from_the_measured_rate():
    from hf_ralm.utils.progress import Pace

    times = iter([100.0, 104.0, 110.0])
    pace = Pace(times.__next__)
    assert pace.seconds_left(10, 110) is None  # the first count only starts the clock
    assert pace.seconds_left(30, 110) == pytest.approx(16.0)  # 20 units in 4 s: the 80 left in 16 s
    assert pace.seconds_left(40, 110) == pytest.approx(70 * 10.0 / 30)


def test_the_build_estimate_is_restated_at_the_measured_speed(caplog):
    """The build said "roughly 2 minutes" (its constant, measured on an idle machine) and took 5.8 on busy cores:
    some seconds into reading, it says how long the build takes at the speed measured, the read's first step (the
    workers' start) left out of the rate."""
    from hf_ralm.retrieval.index_builds import BUILD_READ_SHARE, RESTATE_AFTER_S, build_pace

    assert build_pace("dense (contriever)") is None  # its time is the encoding's: a bar of its own says it
    now = [0.0]
    pace = build_pace("bm25", clock=lambda: now[0])
    with caplog.at_level("INFO", logger="hf_ralm"):
        for when, done in [(0.0, 0), (30.0, 5_000_000), (30.0 + RESTATE_AFTER_S / 2, 7_500_000)]:
            now[0] = when
            pace(done, 150_000_000)  # the first step's 30 s, then 1 MB/s: too early to say
        assert caplog.messages == []
        for when, done in [(50.0, 25_000_000), (60.0, 35_000_000)]:  # said once
            now[0] = when
            pace(done, 150_000_000)
    whole = (50 + 125) / BUILD_READ_SHARE["bm25"]  # 50 s so far, 125 MB left at 1 MB/s
    assert caplog.messages == [f"hf-ralm: the bm25 build, timed on 50 s of reading: roughly {whole / 60:.0f} min "
                               f"in all ({(whole - 50) / 60:.0f} min more)"]


def test_the_run_estimate_times_its_windows_under_a_bar(tiny_model_dir, capsys):
    import hf_ralm
    from hf_ralm.evaluation.run_cost import estimate_run

    model = hf_ralm.RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), max_length=16, **ON_TEST_DEVICE)
    capsys.readouterr()
    estimate_run(model.language_model, model.tokenizer, EVAL_TEXT, model.config, batch_size=2)
    assert re.search(r"Timing the run's windows: 100%.*\| 4/4 ", capsys.readouterr().err)


def test_a_bar_whose_step_takes_long_shows_its_line_again(monkeypatch):
    """One step longer than SILENCE_S (a batch of windows on a busy CPU) left a log silent for minutes: the bar's
    line comes again, its elapsed time moved, and stops once the bar closes."""
    import time

    from hf_ralm.utils import progress

    monkeypatch.setattr(progress, "SILENCE_S", 0.3)
    out = io.StringIO()
    bar = progress.tqdm(total=10, desc="Scoring", unit="win", file=out)
    bar.update(1)
    time.sleep(1.5)  # one long step
    lines = out.getvalue().splitlines()
    assert len([line for line in lines if "1/10" in line]) >= 2, lines
    bar.close()
    closed = out.getvalue()
    time.sleep(1.0)
    assert out.getvalue() == closed  # a closed bar stays quiet
