"""turnlog: an event-sourced history kernel for LLM agents.

Every input that can reach a model is appended to an immutable, hash-chained
log first; prompts are packed from the log by deterministic projections, so
any past request can be replayed byte for byte and explained event by event.

    >>> import turnlog
    >>> log = turnlog.open(":memory:")
    >>> log.append("s1", turnlog.events.UserMessageAdded(text="hello")).last_seq
    0

The main path is at the top level (`open`, `Log`, `Draft`, `Policy`, `pack`,
`Packer`, `Replayer`, `Compactor`, `KernelError`); the rest is in public submodules:
``turnlog.events`` (the event kinds and their JSON form), ``turnlog.errors`` (every
error), ``turnlog.log`` (what a `Log` returns and takes besides events),
``turnlog.stores`` (the storage interface and backends), ``turnlog.packing``
(stages, prompts, tokens), ``turnlog.replay`` (recorded requests and replays),
``turnlog.compaction`` (summarizers), ``turnlog.memories`` (memories and recall),
``turnlog.validation`` (argument checks) and ``turnlog.testing`` (strategies,
checkers and the store suite for tests).
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING

from . import _locations
from . import compaction as compaction
from . import errors as errors
from . import events as events
from . import log as log
from . import memories as memories
from . import packing as packing
from . import replay as replay
from . import stores as stores
from . import validation as validation
from ._compact import Compactor
from ._errors import KernelError
from ._log import Draft, Log
from ._pack import pack
from ._packer import Packer
from ._policy import Policy
from ._replay import Replayer

__all__ = [
    "Compactor",
    "Draft",
    "KernelError",
    "Log",
    "Packer",
    "Policy",
    "Replayer",
    "open",
    "pack",
]

#: Names the package exported in 0.2.0 (or added at the top level after it) and now
#: exports from a submodule: the old path ``turnlog.NAME`` still resolves, with a
#: `DeprecationWarning`, until 0.4.0.
_MOVED = {
    "AppendConflictError": "errors",
    "Appended": "log",
    "AssistantMessageAdded": "events",
    "BlobNotFoundError": "errors",
    "BlobRef": "events",
    "Body": "events",
    "Breakpoint": "packing",
    "Budget": "packing",
    "BudgetExceededError": "errors",
    "Checkpoint": "log",
    "CompactionCommitted": "events",
    "CompactionError": "errors",
    "CompactionFailed": "events",
    "Copied": "log",
    "CostEstimate": "compaction",
    "DECISIONS": "packing",
    "DEFAULT_STAGES": "packing",
    "Decision": "packing",
    "DecisionChange": "replay",
    "DecodeError": "errors",
    "EVENT_KINDS": "events",
    "Embedder": "memories",
    "Event": "events",
    "EventTooLargeError": "errors",
    "EventsPinned": "events",
    "ExtractiveSummarizer": "compaction",
    "ForkedProcessError": "errors",
    "GENESIS": "log",
    "Head": "log",
    "HistoryMismatchError": "errors",
    "IdempotencyError": "errors",
    "ImagePart": "events",
    "ImportFormatError": "errors",
    "InvalidArgumentError": "errors",
    "InvalidEventError": "errors",
    "LMDBStore": "stores",
    "MEMORY_SECTION": "memories",
    "Memory": "memories",
    "MemoryBook": "memories",
    "MemoryChanged": "events",
    "MemoryManager": "memories",
    "MemoryStore": "stores",
    "Message": "packing",
    "ModelInfo": "packing",
    "ModelTable": "packing",
    "NEW_SESSION": "log",
    "NotificationAdded": "events",
    "Outcome": "compaction",
    "POLICY_PARTS": "packing",
    "PackError": "errors",
    "PackState": "packing",
    "Packed": "packing",
    "Part": "events",
    "PolicyError": "errors",
    "PolicySet": "events",
    "PostgresStore": "stores",
    "Problem": "log",
    "Projection": "packing",
    "Prompt": "packing",
    "ProviderErrorReceived": "events",
    "ReadTxn": "stores",
    "ReasoningPart": "events",
    "RecallAdded": "events",
    "RecallHit": "events",
    "Recaller": "memories",
    "Recorded": "replay",
    "Renderer": "packing",
    "ReplayMismatchError": "errors",
    "ReplayResult": "replay",
    "RequestDiff": "replay",
    "RequestIssued": "events",
    "ResponseReceived": "events",
    "Retries": "log",
    "SUMMARY_SECTION": "packing",
    "Section": "packing",
    "SessionForked": "events",
    "SessionRewound": "events",
    "Snapshot": "log",
    "Stage": "packing",
    "StageReport": "packing",
    "StateSaved": "events",
    "Store": "stores",
    "StoreCorruptError": "errors",
    "StoreError": "errors",
    "StoreFormatError": "errors",
    "StoreFullError": "errors",
    "StoreNotFoundError": "errors",
    "StoreReadOnlyError": "errors",
    "StoreUnavailableError": "errors",
    "Summarizer": "compaction",
    "Summary": "compaction",
    "SummaryRequest": "compaction",
    "SystemSectionSet": "events",
    "TextPart": "events",
    "TokenCounter": "packing",
    "TokenizerError": "errors",
    "ToolCall": "events",
    "ToolResultAdded": "events",
    "ToolSpec": "events",
    "ToolsSet": "events",
    "UnknownSessionError": "errors",
    "Usage": "events",
    "UserMessageAdded": "events",
    "VerificationError": "errors",
    "VerifyReport": "log",
    "WriteTxn": "stores",
    "backoff": "log",
    "copy_log": "log",
    "covered_digest": "events",
    "event_from_json": "events",
    "event_to_json": "events",
    "export_events": "log",
    "get_counter": "packing",
    "hide_credentials": "stores",
    "import_events": "log",
    "notification_text": "packing",
    "recall_text": "packing",
    "unfinished_copy": "log",
}

#: Engine parts the package exported in 0.2.0 that leave the public API: the old
#: path resolves, with a `DeprecationWarning`, until 0.4.0.
_INTERNAL = {
    "Item": "_projection",
    "PackIndex": "_pack._index",
    "Unit": "_projection",
}

if not TYPE_CHECKING:  # type checkers see only the new paths

    def __getattr__(name: str) -> object:
        """Resolve a name moved out of the top level, warning of its new path."""
        import importlib

        if name in _MOVED:
            where = f"turnlog.{_MOVED[name]}"
            warnings.warn(
                f"turnlog.{name} has moved: import it from {where} "
                f"(from {where} import {name}); the old path goes in the next "
                "release",
                DeprecationWarning,
                stacklevel=2,
            )
        elif name in _INTERNAL:
            where = f"turnlog.{_INTERNAL[name]}"
            warnings.warn(
                f"turnlog.{name} is an internal part of the engine and leaves the "
                "public API in the next release; nothing replaces it",
                DeprecationWarning,
                stacklevel=2,
            )
        else:
            raise AttributeError(f"module 'turnlog' has no attribute {name!r}")
        return getattr(importlib.import_module(where), name)


__version__ = "0.3.0"


@validation.refuse_unknown_options(
    "turnlog.open()", usage='turnlog.open("./agent-store") (or ":memory:", or a postgresql:// URL)'
)
def open(  # noqa: A001 - the package's entry point, like sqlite3.connect / lmdb.open
    path: str | os.PathLike[str],
    *,
    readonly: bool = False,
    blob_threshold: int = 64 * 1024,
    sync: bool = True,
    create: bool = True,
) -> Log:
    """Open (or create) a log.

    Parameters:
        path: a directory for the embedded LMDB store (created if missing),
            ``":memory:"`` for an in-memory log, or a PostgreSQL URL
            (``postgresql://user@host:port/dbname?...``, see `PostgresStore`;
            needs ``pip install 'turnlog[postgres]'``). Which store a location
            names is looked up in one table (``turnlog._locations.SCHEMES``).
        readonly: open an existing store for reading only.
        blob_threshold: text payloads above this many bytes are stored as blobs.
        sync: fsync every commit (LMDB only; PostgreSQL commits as the server
            is configured, durably by default).
        create: create the store when there is none at ``path``; when False, a
            missing store raises `StoreNotFoundError` and nothing is created.

    Raises:
        StoreNotFoundError: no store at ``path``, opened ``readonly`` or with
            ``create=False``.
        StoreError: the store cannot be opened (wrong format, corrupt, no access,
            server unreachable).
    """
    validation.check_type(create, bool, "create")
    scheme, location = _locations.scheme_for(path)
    store = scheme.open(location, readonly, sync, create)
    try:
        return Log(store, blob_threshold=blob_threshold)
    except BaseException:
        store.close()  # a bad option must not leave the environment open in this process
        raise
