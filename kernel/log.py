"""What `turnlog.Log` returns and takes besides events: append results, heads,
snapshots, the retry policy of `Log.update` (`Retries`), verification reports,
checkpoints and copies between logs.

``NEW_SESSION`` is the ``expected_seq`` of an append that must create its
session; ``GENESIS`` is the ``prev`` hash of a session's first event.
"""

from __future__ import annotations

from ._chain import GENESIS, Checkpoint
from ._copy import Copied, copy_log, export_events, import_events, unfinished_copy
from ._erase import PLACEHOLDER, Erased
from ._log import NEW_SESSION, Appended, Head, Retries, Snapshot, backoff
from ._verify import Problem, VerifyReport

__all__ = [
    "Appended",
    "Checkpoint",
    "Copied",
    "Erased",
    "GENESIS",
    "Head",
    "NEW_SESSION",
    "PLACEHOLDER",
    "Problem",
    "Retries",
    "Snapshot",
    "VerifyReport",
    "backoff",
    "copy_log",
    "export_events",
    "import_events",
    "unfinished_copy",
]
