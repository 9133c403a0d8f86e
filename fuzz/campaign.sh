#!/usr/bin/env bash
# A long fuzzing campaign of one target that keeps going after a finding.
#
#   fuzz/campaign.sh TARGET SECONDS [WORKDIR]
#
# Runs fuzz/fuzz_TARGET.py for SECONDS in total on WORKDIR/TARGET/corpus (new
# inputs) plus the committed seeds, restarting after each crash; crash inputs
# go to WORKDIR/TARGET/artifacts and every run's log to WORKDIR/TARGET/run-N.log.
# `python fuzz/stats.py WORKDIR/TARGET` sums executions and prints cov/ft.
set -uo pipefail
target=$1
total=$2
work=${3:-/tmp/turnlog-fuzz}
here="$(cd "$(dirname "$0")" && pwd)"
dir="$work/$target"
mkdir -p "$dir/corpus" "$dir/artifacts"
dict=()
[ -f "$here/dicts/$target.dict" ] && dict=("-dict=$here/dicts/$target.dict")
start=$(date +%s)
n=0
while :; do
    left=$(( total - ($(date +%s) - start) ))
    [ "$left" -le 5 ] && break
    n=$((n + 1))
    python "$here/fuzz_$target.py" "$dir/corpus" "$here/corpus/$target" \
        -max_total_time="$left" -artifact_prefix="$dir/artifacts/" -print_final_stats=1 \
        -timeout=60 -rss_limit_mb=4096 "${dict[@]}" >"$dir/run-$n.log" 2>&1
    rc=$?
    echo "run $n exit $rc after $(( $(date +%s) - start ))s" >>"$dir/runs.txt"
    # A harness that dies at once (an import error, a module caught mid-edit) must
    # not spin: wait, and give up after three such runs in a row.
    if [ $(( $(date +%s) - start - (total - left) )) -lt 10 ]; then
        quick=$(( ${quick:-0} + 1 ))
        if [ "$quick" -ge 3 ]; then
            echo "giving up: the harness died at once $quick times (see $dir/run-$n.log)" \
                | tee -a "$dir/runs.txt" >&2
            exit 1
        fi
        sleep 30
    else
        quick=0
    fi
done
echo "done: $n runs in $(( $(date +%s) - start ))s" >>"$dir/runs.txt"
