"""What every benchmark script does around its run: warn when the machine is busy,
and put its generated block into docs/benchmarks.md between its markers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def load_before() -> float:
    """The 1-minute load average now, with a warning when other work will skew figures."""
    load = os.getloadavg()[0]
    if load > 0.5:
        print(
            f"warning: load average is {load:.2f}; other work will skew the figures",
            file=sys.stderr,
        )
    return load


def write(heading: str, begin: str, end: str, text: str, *, first: bool = False) -> None:
    """Replace the block between ``begin`` and ``end`` (``text`` holds both markers).

    Without the markers, the block goes under ``heading`` when the document has it,
    else under a new ``heading``: first under the title with ``first``, last otherwise.
    """
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        doc = head + text + rest.split(end, 1)[1]
    elif heading in doc:
        head, rest = doc.split(heading, 1)
        doc = head + heading + "\n\n" + text + "\n" + rest
    elif first:
        title, _, rest = doc.partition("\n")
        doc = f"{title}\n\n{heading}\n\n{text}\n{rest}"
    else:
        doc = doc.rstrip("\n") + f"\n\n{heading}\n\n{text}\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(doc)
    print(f"updated {DOC}", file=sys.stderr)
