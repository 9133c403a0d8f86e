"""turnlog: an event-sourced history kernel for LLM agents.

Every input that can reach a model is appended to an immutable, hash-chained
log first; prompts are packed from the log by deterministic projections, so
any past request can be replayed byte for byte and explained event by event.

    >>> import turnlog
    >>> log = turnlog.open(":memory:")
    >>> log.append("s1", turnlog.UserMessageAdded(text="hello")).last_seq
    0
"""

from __future__ import annotations

import os

from . import _locations
from ._chain import GENESIS, Checkpoint, covered_digest
from ._codec import event_from_json, event_to_json
from ._compact import Compactor, CostEstimate, Outcome
from ._copy import Copied, copy_log, export_events, import_events, unfinished_copy
from ._errors import (
    AppendConflictError,
    BlobNotFoundError,
    BudgetExceededError,
    CompactionError,
    DecodeError,
    EventTooLargeError,
    ForkedProcessError,
    HistoryMismatchError,
    IdempotencyError,
    ImportFormatError,
    InvalidArgumentError,
    InvalidEventError,
    KernelError,
    PackError,
    PolicyError,
    ReplayMismatchError,
    StoreCorruptError,
    StoreError,
    StoreFormatError,
    StoreFullError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreUnavailableError,
    TokenizerError,
    UnknownSessionError,
    VerificationError,
)
from ._events import (
    EVENT_KINDS,
    AssistantMessageAdded,
    BlobRef,
    Body,
    CompactionCommitted,
    CompactionFailed,
    Event,
    EventsPinned,
    ImagePart,
    MemoryChanged,
    NotificationAdded,
    Part,
    PolicySet,
    ProviderErrorReceived,
    ReasoningPart,
    RecallAdded,
    RecallHit,
    RequestIssued,
    ResponseReceived,
    SessionForked,
    SessionRewound,
    StateSaved,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    Usage,
    UserMessageAdded,
)
from ._lmdb import LMDBStore
from ._log import (
    NEW_SESSION,
    Appended,
    Draft,
    Head,
    Log,
    Problem,
    Retries,
    Snapshot,
    VerifyReport,
    backoff,
)
from ._memories import MEMORY_SECTION, Memory, MemoryBook, MemoryManager
from ._memstore import MemoryStore
from ._models import ModelInfo, ModelTable
from ._pack import (
    DECISIONS,
    DEFAULT_STAGES,
    SUMMARY_SECTION,
    Budget,
    Decision,
    Packed,
    PackIndex,
    PackState,
    Stage,
    StageReport,
    pack,
)
from ._packer import Packer
from ._policy import POLICY_PARTS, Policy
from ._postgres import PostgresStore
from ._projection import Item, Projection, Unit, notification_text, recall_text
from ._prompt import Breakpoint, Message, Prompt, Section
from ._recall import Embedder, Recaller
from ._replay import DecisionChange, Recorded, Renderer, Replayer, ReplayResult, RequestDiff
from ._store import ReadTxn, Store, WriteTxn, hide_credentials
from ._summarize import ExtractiveSummarizer, Summarizer, Summary, SummaryRequest
from ._tokens import TokenCounter, get_counter

__all__ = [
    "AppendConflictError",
    "Appended",
    "AssistantMessageAdded",
    "BlobNotFoundError",
    "BlobRef",
    "Body",
    "Breakpoint",
    "Budget",
    "BudgetExceededError",
    "Checkpoint",
    "CompactionCommitted",
    "CompactionError",
    "CompactionFailed",
    "Compactor",
    "Copied",
    "CostEstimate",
    "DECISIONS",
    "DEFAULT_STAGES",
    "Decision",
    "DecisionChange",
    "DecodeError",
    "Draft",
    "EVENT_KINDS",
    "Embedder",
    "Event",
    "EventTooLargeError",
    "EventsPinned",
    "ExtractiveSummarizer",
    "ForkedProcessError",
    "GENESIS",
    "Head",
    "HistoryMismatchError",
    "IdempotencyError",
    "ImagePart",
    "ImportFormatError",
    "InvalidArgumentError",
    "InvalidEventError",
    "Item",
    "KernelError",
    "LMDBStore",
    "Log",
    "MEMORY_SECTION",
    "Memory",
    "MemoryBook",
    "MemoryChanged",
    "MemoryManager",
    "MemoryStore",
    "Message",
    "ModelInfo",
    "ModelTable",
    "NEW_SESSION",
    "NotificationAdded",
    "Outcome",
    "POLICY_PARTS",
    "PackError",
    "PackIndex",
    "PackState",
    "Packed",
    "Packer",
    "Part",
    "Policy",
    "PolicyError",
    "PolicySet",
    "PostgresStore",
    "Problem",
    "Projection",
    "Prompt",
    "ProviderErrorReceived",
    "ReadTxn",
    "ReasoningPart",
    "RecallAdded",
    "RecallHit",
    "Recaller",
    "Recorded",
    "Renderer",
    "ReplayMismatchError",
    "ReplayResult",
    "Replayer",
    "RequestDiff",
    "RequestIssued",
    "ResponseReceived",
    "Retries",
    "SUMMARY_SECTION",
    "Section",
    "SessionForked",
    "SessionRewound",
    "Snapshot",
    "Stage",
    "StageReport",
    "StateSaved",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatError",
    "StoreFullError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "StoreUnavailableError",
    "Summarizer",
    "Summary",
    "SummaryRequest",
    "SystemSectionSet",
    "TextPart",
    "TokenCounter",
    "TokenizerError",
    "ToolCall",
    "ToolResultAdded",
    "ToolSpec",
    "ToolsSet",
    "Unit",
    "UnknownSessionError",
    "Usage",
    "UserMessageAdded",
    "VerificationError",
    "VerifyReport",
    "WriteTxn",
    "backoff",
    "copy_log",
    "covered_digest",
    "event_from_json",
    "event_to_json",
    "export_events",
    "get_counter",
    "hide_credentials",
    "import_events",
    "notification_text",
    "open",
    "pack",
    "recall_text",
    "unfinished_copy",
]

__version__ = "0.2.0"


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
    if not isinstance(create, bool):
        raise InvalidArgumentError(f"create must be a bool, found {type(create).__name__}")
    scheme, location = _locations.scheme_for(path)
    store = scheme.open(location, readonly, sync, create)
    try:
        return Log(store, blob_threshold=blob_threshold)
    except BaseException:
        store.close()  # a bad option must not leave the environment open in this process
        raise
