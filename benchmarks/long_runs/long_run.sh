#!/usr/bin/env bash
# Run one long job in the background, at low priority, from a git worktree pinned to one commit, and commit its
# completed chunks to this checkout as they appear; a later session (or a fresh clone) runs the same line again and
# the job resumes from the committed records (see results/README.md).
#
#   bash benchmarks/long_runs/long_run.sh NAME COMMIT RECORDS_DIR [RECORDS_DIR...] -- COMMAND [ARGS...]
#
# NAME         the job's name: its log is ~/.cache/hf-ralm/long-runs/NAME.log, its pid file NAME.pid beside it
# COMMIT       the commit whose code runs (a worktree ../run-<commit> is made once and reused)
# RECORDS_DIR  a folder under results/ (relative to this checkout) whose chunks are committed; several when
#              COMMAND chains runs that keep records in different folders
# COMMAND      run in the worktree with PYTHONPATH=<worktree>:<worktree>/src, so that its code runs, not this one's;
#              paths into this checkout must be absolute (e.g. --output-dir "$PWD/results/x")
#
# Why the autogroup: every setsid session is a scheduler autogroup of its own, and the kernel shares the CPU equally
# between autogroups whatever `nice` says inside them, so `nice -n 19` alone leaves a job an equal share beside the
# foreground's work. Setting the autogroup's own nice value (/proc/self/autogroup) really puts the job behind it.
#
#   bash benchmarks/long_runs/long_run.sh --status        # the jobs started from this machine, running or not
#   bash benchmarks/long_runs/long_run.sh --stop NAME     # ends a job (it resumes when started again)
#
# HF_RALM_LONG_RUNS (the state folder, default ~/.cache/hf-ralm/long-runs) and HF_RALM_COMMIT_EVERY (seconds between
# the committer's looks, default 300) are for tests.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
state="${HF_RALM_LONG_RUNS:-$HOME/.cache/hf-ralm/long-runs}"
mkdir -p "$state"

if [ "${1:-}" = "--status" ]; then
  for pidfile in "$state"/*.pid; do
    [ -e "$pidfile" ] || { echo "no job started from this machine"; exit 0; }
    name="$(basename "$pidfile" .pid)"
    if kill -0 "$(cat "$pidfile")" 2>/dev/null; then echo "$name: running"; else echo "$name: not running"; fi
    # a job that has logged nothing yet has no last line: not a failure, the next jobs are still listed
    tail -c 300 "$state/$name.log" | tr '\r' '\n' | { grep -av '^$' || true; } | tail -1 | sed 's/^/  /'
  done
  exit 0
fi
if [ "${1:-}" = "--stop" ]; then
  pid="$(cat "$state/$2.pid")"
  kill -- "-$pid" 2>/dev/null || echo "$2 was not running"
  exit 0
fi

usage() { sed -n '2,12p' "$0" >&2; exit 2; }
[ $# -ge 5 ] || usage
name="$1" commit="$(git -C "$repo" rev-parse --short "$2")"
shift 2
records=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    results/?*) records+=("$1") ;;
    *) echo "RECORDS_DIR must be a folder under results/, got $1" >&2; exit 2 ;;
  esac
  shift
done
[ $# -ge 2 ] && [ ${#records[@]} -ge 1 ] || usage
shift  # the --
if [ -e "$state/$name.pid" ] && kill -0 "$(cat "$state/$name.pid")" 2>/dev/null; then
  echo "$name is running already (pid $(cat "$state/$name.pid")); --stop $name first" >&2
  exit 1
fi
worktree="$(dirname "$repo")/run-$commit"
[ -d "$worktree" ] || git -C "$repo" worktree add --detach "$worktree" "$commit" >/dev/null

# the job: its own session and autogroup, at the lowest priority
setsid bash -c '
  echo 19 > /proc/self/autogroup 2>/dev/null || true
  cd "$1"; shift
  # the worktree root too: the editable install puts the main checkout on the path, whose benchmarks/ package
  # would otherwise serve the pinned scripts their helpers (bench_setup, table_runs)
  export PYTHONPATH="$PWD:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
  exec nice -n 19 "$@"' job "$worktree" "$@" >>"$state/$name.log" 2>&1 </dev/null &
echo $! >"$state/$name.pid"
job=$!

# its committer: every few minutes and once the job ends, the chunks that are complete and the settings (never a
# hidden file: a writer's .tmp- file, the workers' .workers.lock and .worker- markers)
setsid bash -c '
  echo 19 > /proc/self/autogroup 2>/dev/null || true
  repo="$1" job="$2" name="$3" every="$4"
  shift 4
  records=("$@")
  commit_chunks() {
    cd "$repo"
    git add -- "${records[@]}" ":(exclude,glob)results/**/.*" 2>/dev/null || return 0
    git diff --cached --quiet -- "${records[@]}" && return 0
    # what this commit adds or changes (a figure job rewrites CSVs rather than adding chunks), and the chunks in all
    files="$(git diff --cached --name-only -- "${records[@]}" | wc -l)"
    chunks="$(git ls-files -- "${records[@]}" | grep -c "chunk-" || true)"
    for try in 1 2 3; do  # the foreground may hold the index lock for a moment
      git commit -q -m "Runs: $name records ($files files; $chunks chunks in all)" -- "${records[@]}" && return 0
      sleep 5
    done
  }
  while kill -0 "$job" 2>/dev/null; do sleep "$every"; commit_chunks; done
  commit_chunks' committer "$repo" "$job" "$name" "${HF_RALM_COMMIT_EVERY:-300}" "${records[@]}" >>"$state/$name.log" 2>&1 </dev/null &
echo "$name: started from $worktree (log: $state/$name.log)"
# the project's long runs are bfloat16: on a CPU that does not compute it, code from before widen_bfloat16_matmuls
# goes several times slower (docs/results.md, "bfloat16 on a CPU without bfloat16 instructions"), which a session
# should know at the start, not hours later
bf16=0
python -c 'import sys; from hf_ralm.utils import bfloat16_instructions; sys.exit(3 * (bfloat16_instructions() is False))' \
  2>/dev/null || bf16=$?
if [ "$bf16" -eq 3 ]; then
  echo "$name: note: this CPU has no bfloat16 instructions (AVX512-BF16 or AMX): a bfloat16 job runs several times slower here unless its code widens bfloat16 products to float32 (hf_ralm.utils.widen_bfloat16_matmuls)"
fi
