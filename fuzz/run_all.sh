#!/usr/bin/env bash
# Fuzz every target for a short, bounded time (CI): fails on any finding.
#
#   fuzz/run_all.sh [SECONDS_PER_TARGET]     (default 20; 6 targets)
#
# The seed is fixed (FUZZ_SEED, default 1) so that a CI run is reproducible: a
# slower machine explores a prefix of the same sequence. Long campaigns with
# random seeds are described in fuzz/README.md.
#
# New inputs go to a throwaway directory (the committed seeds are read, never
# written); a crashing input is copied to fuzz-findings/ in the working
# directory, with the command that reproduces it.
set -uo pipefail
per=${1:-20}
here="$(cd "$(dirname "$0")" && pwd)"
if ! python -c "import atheris" 2>/dev/null; then
    echo "fuzz/run_all.sh: atheris is not installed (pip install -e '.[fuzz]')" >&2
    exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
for harness in "$here"/fuzz_*.py; do
    target="$(basename "$harness" .py)"
    target="${target#fuzz_}"
    mkdir -p "$work/$target/corpus" "$work/$target/artifacts"
    dict=()
    [ -f "$here/dicts/$target.dict" ] && dict=("-dict=$here/dicts/$target.dict")
    start=$(date +%s)
    python "$harness" "$work/$target/corpus" "$here/corpus/$target" \
        -max_total_time="$per" -seed="${FUZZ_SEED:-1}" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/$target/artifacts/" "${dict[@]}" >"$work/$target/log" 2>&1
    rc=$?
    runs=$(grep -o '^stat::number_of_executed_units: [0-9]*' "$work/$target/log" | awk '{print $2}')
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$work/$target/log" | tail -1)
    echo "fuzz $target: exit $rc, ${runs:-?} executions, ${cov:-no coverage line}, $(( $(date +%s) - start ))s"
    if [ "$rc" -ne 0 ]; then
        failed+=("$target")
        mkdir -p fuzz-findings
        for f in "$work/$target/artifacts"/*; do
            [ -e "$f" ] || continue
            cp "$f" "fuzz-findings/$target-$(basename "$f")"
            echo "  finding: fuzz-findings/$target-$(basename "$f")"
            echo "  reproduce: python fuzz/fuzz_$target.py --replay fuzz-findings/$target-$(basename "$f")"
        done
        grep -v '^#\|^INFO\|^WARNING' "$work/$target/log" | tail -25 | sed 's/^/  | /'
    fi
done
if [ ${#failed[@]} -ne 0 ]; then
    echo "fuzz: findings in ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: no finding"
