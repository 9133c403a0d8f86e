"""What recording and replaying a request returns: the record of a request, the
result of a replay, the differences between two requests, and what a session's
recorded requests cost (`Replayer.cost`, with the cache rules it reads them by).
"""

from __future__ import annotations

from ._cost import (
    BREAKPOINT_CACHE,
    PREFIX_CACHE,
    CacheRule,
    CostedRequest,
    CostTotal,
    RequestCost,
    SessionCost,
    cost_of,
)
from ._replay import DecisionChange, Recorded, ReplayResult, RequestDiff

__all__ = [
    "BREAKPOINT_CACHE",
    "CacheRule",
    "CostTotal",
    "CostedRequest",
    "DecisionChange",
    "PREFIX_CACHE",
    "Recorded",
    "ReplayResult",
    "RequestCost",
    "RequestDiff",
    "SessionCost",
    "cost_of",
]
