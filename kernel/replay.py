"""What recording and replaying a request returns: the record of a request, the
result of a replay, and the differences between two requests.
"""

from __future__ import annotations

from ._replay import DecisionChange, Recorded, ReplayResult, RequestDiff

__all__ = [
    "DecisionChange",
    "Recorded",
    "ReplayResult",
    "RequestDiff",
]
