"""The long-run scripts (benchmarks/long_runs/long_run.sh, benchmarks/figures/figure_runs.sh --status), run in a
scratch git repository: a job runs from a worktree pinned to its commit, its committer commits the records folder's
finished chunks and nothing else (no writer's temporary file, no workers' lock or marker, no other staged change), a
running job is not started twice, and the figures' status counts the rows still without an interval."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture()
def scratch(tmp_path):
    """A git repository holding the two scripts (one commit), a state folder for the jobs, and their environment."""
    if shutil.which("git") is None:
        pytest.fail("git is needed to test the long-run scripts")
    repo = tmp_path / "repo"
    for script in ("long_runs/long_run.sh", "figures/figure_runs.sh"):  # where they are in this repository
        (repo / "benchmarks" / script).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "benchmarks" / script, repo / "benchmarks" / script)
    git(tmp_path, "init", "-q", str(repo))
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "test")
    git(repo, "add", "benchmarks")
    git(repo, "commit", "-q", "-m", "scripts")
    env = {**os.environ, "HF_RALM_LONG_RUNS": str(tmp_path / "state"), "HF_RALM_COMMIT_EVERY": "1"}
    return repo, env


def long_run(repo: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "benchmarks/long_runs/long_run.sh", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_job_runs_pinned_and_its_committer_commits_only_finished_chunks(scratch):
    repo, env = scratch
    commit = git(repo, "rev-parse", "--short", "HEAD").strip()
    (repo / "notes.txt").write_text("the foreground's own work\n")
    git(repo, "add", "notes.txt")  # staged by the foreground: never part of a records commit
    records = repo / "results" / "x"
    job = ("mkdir -p $0 && echo 1 > $0/chunk-00000-00002.json.gz && echo half > $0/.tmp-chunk-00002-00004 "
           "&& touch $0/.workers.lock $0/.worker-0.host-1 && pwd > $0/where")  # the workers' lock and marker: state
    started = long_run(repo, env, "x", "HEAD", "results/x", "--", "bash", "-c", job, str(records))
    assert started.returncode == 0, started.stderr
    assert f"run-{commit}" in started.stdout
    tracked = ["results/x/chunk-00000-00002.json.gz", "results/x/where"]
    for _ in range(120):  # the job (at the lowest priority) ends soon; its committer looks every second and at the end
        done = "x: not running" in long_run(repo, env, "--status").stdout
        # committed, not only staged: the committer adds the files a moment before its commit lands
        if done and git(repo, "ls-tree", "-r", "--name-only", "HEAD", "results/x").split() == tracked:
            break
        time.sleep(0.5)
    status = long_run(repo, env, "--status")
    assert status.returncode == 0 and "x: not running" in status.stdout  # its log is empty: nothing to show
    # one commit, or several if the committer looked while the job was writing: together, the finished files only
    commits = git(repo, "log", "--format=%H", "--grep=^Runs: ").split()
    files = [git(repo, "show", "--name-only", "--format=", c).split() for c in commits]
    assert sorted(f for names in files for f in names) == tracked
    for c, names in zip(commits, files):
        subject = git(repo, "log", "-1", "--format=%s", c).strip()
        assert subject == f"Runs: x records ({len(names)} files; 1 chunks in all)"
    assert (records / "where").read_text().strip() == str(repo.parent / f"run-{commit}")  # the pinned worktree
    assert "notes.txt" in git(repo, "diff", "--cached", "--name-only")  # still staged, not committed


def test_a_running_job_is_not_started_twice_and_stops(scratch):
    repo, env = scratch
    args = ("sleeper", "HEAD", "results/s", "--", "sleep", "60")
    assert long_run(repo, env, *args).returncode == 0
    assert long_run(repo, env, "other", "HEAD", "results/o", "--", "sleep", "60").returncode == 0
    again = long_run(repo, env, *args)
    assert again.returncode == 1 and "running already" in again.stderr
    status = long_run(repo, env, "--status")  # both jobs listed, though neither has logged a line
    assert status.returncode == 0 and "other: running" in status.stdout and "sleeper: running" in status.stdout
    assert long_run(repo, env, "--stop", "other").returncode == 0
    assert long_run(repo, env, "--stop", "sleeper").returncode == 0
    for _ in range(40):
        if "sleeper: not running" in long_run(repo, env, "--status").stdout:
            break
        time.sleep(0.25)
    assert "sleeper: not running" in long_run(repo, env, "--status").stdout


def test_a_records_folder_outside_the_runs_folder_is_refused(scratch):
    repo, env = scratch
    refused = long_run(repo, env, "y", "HEAD", "docs", "--", "true")
    assert refused.returncode == 2 and "must be a folder under results/" in refused.stderr


def test_the_figures_status_counts_rows_without_an_interval(scratch):
    repo, env = scratch
    runs = repo / "results" / "figures"
    runs.mkdir(parents=True)
    (runs / "stride.csv").write_text("model,stride,token_ppl,token_ppl_low\nm,4,20.0,19.0\nm,8,21.0,\nm,16,22.0,\n")
    (runs / "gate_results.csv").write_text("method,token_ppl,vs_none_low\nnone,20.0,0\nalways,22.0,\n")
    status = subprocess.run(["bash", "benchmarks/figures/figure_runs.sh", "--status"], cwd=repo, env=env,
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert "results/figures/stride.csv: 3 rows, 2 without an interval" in lines
    assert "results/figures/gate_results.csv: 2 rows, 1 without an interval" in lines
    assert "results/figures/retrievers.csv: 0 rows, 0 without an interval" in lines
