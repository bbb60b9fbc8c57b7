#!/usr/bin/env bash
# The suite under contention: does it stay green on a loaded or slow machine?
#
#   tests/contention/run.sh [burners|pinned|both] [RUNS]     (default: both 3)
#
# burners: the README's test command, as CI runs it, with two CPU burners beside it
#          (stress-ng --cpu 2 where installed, else two Python busy loops), RUNS times.
# pinned:  every test marked `wallclock` (real time passes in it) pinned to one core with
#          `taskset -c 0`, one test at a time, RUNS times.
# Prints one line per run (mode, run, exit code, wall seconds, pytest's closing line) and
# exits non-zero if any run failed. Logs go to $CONTENTION_LOGS (default .contention-logs/).
# Run it from a shell where the test command works (the project's virtual environment
# active; for the real-vLLM and docker tiers, the variables .ci/run exports).
set -uo pipefail
cd "$(dirname "$0")/../.."

mode=${1:-both}
runs=${2:-3}
logs=${CONTENTION_LOGS:-.contention-logs}
mkdir -p "$logs"
case "$mode" in burners|pinned|both) ;; *) echo "usage: $0 [burners|pinned|both] [RUNS]" >&2; exit 2 ;; esac
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a whole number >= 1, not '$runs'" >&2; exit 2; }

test_cmd=$(sed -n '/<!-- test-command -->/,/<!-- \/test-command -->/p' README.md | grep -v '^<!--' | grep -v '^```' | sed '/^\s*$/d')
[ -n "$test_cmd" ] || { echo "no test command between the README's test-command markers" >&2; exit 2; }

burners=()
start_burners() {
  if command -v stress-ng >/dev/null; then
    stress-ng --cpu 2 --quiet >/dev/null 2>&1 &
    burners+=($!)
  else
    for _ in 1 2; do python3 -c 'while True: pass' & burners+=($!); done
  fi
}
stop_burners() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  burners=()
}
trap stop_burners EXIT INT TERM

failed=0
one_run() {  # one_run MODE N COMMAND...
  local name=$1 n=$2; shift 2
  local log="$logs/$name-$n.log" started rc
  started=$(date +%s)
  "$@" >"$log" 2>&1
  rc=$?
  local closing
  closing=$(grep -E '[0-9]+ (passed|failed)' "$log" | tail -1)
  echo "contention: $name run $n of $runs: exit $rc in $(( $(date +%s) - started )) s: ${closing:-no closing line} (log: $log)"
  [ "$rc" -eq 0 ] || failed=1
}

echo "contention: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$mode" != pinned ]; then
  for n in $(seq "$runs"); do
    start_burners
    one_run burners "$n" bash -c "$test_cmd"
    stop_burners
  done
fi
if [ "$mode" != burners ]; then
  command -v taskset >/dev/null || { echo "taskset (util-linux) is needed for the pinned runs" >&2; exit 2; }
  for n in $(seq "$runs"); do
    one_run pinned "$n" taskset -c 0 python -m pytest -m wallclock -n 0
  done
fi
exit "$failed"
