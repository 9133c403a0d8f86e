"""Sum a campaign's figures: ``python fuzz/stats.py /tmp/turnlog-fuzz/TARGET``.

Prints executions (summed over the restarts), the last cov/ft, corpus size,
wall time and the crash inputs found.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_LINE = re.compile(r"^#(\d+)\s+\S+\s+cov: (\d+) ft: (\d+) corp: (\d+)")
_DONE = re.compile(r"^Done (\d+) runs in (\d+) second")
_STAT = re.compile(r"^stat::number_of_executed_units: (\d+)")


def summarize(path: Path) -> dict[str, int]:
    execs = cov = ft = corp = 0
    for log in sorted(path.glob("run-*.log")):
        last = 0
        for line in log.read_text(errors="replace").splitlines():
            if m := _LINE.match(line):
                last = int(m[1])
                cov, ft, corp = int(m[2]), int(m[3]), int(m[4])
            elif m := _STAT.match(line):
                last = int(m[1])
        execs += last
    crashes = len(list((path / "artifacts").glob("*")))
    return {
        "executions": execs,
        "cov": cov,
        "ft": ft,
        "corpus": corp,
        "crashes": crashes,
        "runs": len(list(path.glob("run-*.log"))),
    }


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(Path(arg).name, summarize(Path(arg)))
