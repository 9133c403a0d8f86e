"""Packing: a session's projection and a policy in, a prompt and its explanation out.

The package's modules, one job each: ``_model`` (what a pack returns), ``_budget``
(stage 1), one module per built-in stage (``_truncate``, ``_summaries``,
``_dedup``, ``_prune``, ``_trim``), ``_ledger`` (what a stage acts through),
``_state`` (the reference engine, `PackState`), ``_index`` and ``_indexed`` (the
incremental engine), ``_assemble`` (the prompt and its cache breakpoints),
``_explain`` (the decisions) and ``_engine`` (`pack`). The package is pure: no
module of it reads the log or a store; `Packer`, the I/O shell that packs the
sessions of a log, is ``turnlog._packer``.
"""

from ._engine import DEFAULT_STAGES, Stage, pack
from ._index import PackIndex
from ._model import DECISIONS, SUMMARY_SECTION, Budget, Decision, Packed, StageReport
from ._state import PackState

__all__ = [
    "Budget",
    "DECISIONS",
    "DEFAULT_STAGES",
    "Decision",
    "PackIndex",
    "PackState",
    "Packed",
    "SUMMARY_SECTION",
    "Stage",
    "StageReport",
    "pack",
]
