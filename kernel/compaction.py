"""Compaction's parts besides `turnlog.Compactor`: the summarizer interface, the
request it is given and the summary it returns, the built-in extractive
summarizer, and what a compaction costs and does.
"""

from __future__ import annotations

from ._compact import CostEstimate, Outcome
from ._summarize import ExtractiveSummarizer, Summarizer, Summary, SummaryRequest

__all__ = [
    "CostEstimate",
    "ExtractiveSummarizer",
    "Outcome",
    "Summarizer",
    "Summary",
    "SummaryRequest",
]
