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

from .chain import GENESIS, Checkpoint
from .errors import (
    AppendConflictError,
    BlobNotFoundError,
    BudgetExceededError,
    CompactionError,
    DecodeError,
    EventTooLargeError,
    ForkedProcessError,
    IdempotencyError,
    ImportFormatError,
    InvalidEventError,
    KernelError,
    PackError,
    PolicyError,
    ReplayMismatchError,
    StoreCorruptError,
    StoreError,
    StoreFormatError,
    StoreFullError,
    StoreReadOnlyError,
    TokenizerError,
    UnknownSessionError,
    VerificationError,
)
from .events import (
    AssistantMessageAdded,
    BlobRef,
    CompactionCommitted,
    CompactionFailed,
    Event,
    EventsPinned,
    ImagePart,
    MemoryChanged,
    NotificationAdded,
    PolicySet,
    ProviderErrorReceived,
    ReasoningPart,
    RecallAdded,
    RecallHit,
    RequestIssued,
    ResponseReceived,
    SessionForked,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    Usage,
    UserMessageAdded,
)
from .lmdb import LMDBStore
from .log import NEW_SESSION, Appended, Draft, Head, Log, Problem, Snapshot, VerifyReport
from .memory import MemoryStore
from .policy import Policy
from .store import ReadTxn, Store, WriteTxn

__all__ = [
    "AppendConflictError",
    "Appended",
    "AssistantMessageAdded",
    "BlobNotFoundError",
    "BlobRef",
    "BudgetExceededError",
    "Checkpoint",
    "CompactionCommitted",
    "CompactionError",
    "CompactionFailed",
    "DecodeError",
    "Draft",
    "Event",
    "EventTooLargeError",
    "EventsPinned",
    "ForkedProcessError",
    "GENESIS",
    "Head",
    "IdempotencyError",
    "ImagePart",
    "ImportFormatError",
    "InvalidEventError",
    "KernelError",
    "LMDBStore",
    "Log",
    "MemoryChanged",
    "MemoryStore",
    "NEW_SESSION",
    "NotificationAdded",
    "PackError",
    "Policy",
    "PolicyError",
    "PolicySet",
    "Problem",
    "ProviderErrorReceived",
    "ReadTxn",
    "ReasoningPart",
    "RecallAdded",
    "RecallHit",
    "ReplayMismatchError",
    "RequestIssued",
    "ResponseReceived",
    "SessionForked",
    "SessionRewound",
    "Snapshot",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatError",
    "StoreFullError",
    "StoreReadOnlyError",
    "SystemSectionSet",
    "TextPart",
    "TokenizerError",
    "ToolCall",
    "ToolResultAdded",
    "ToolSpec",
    "ToolsSet",
    "UnknownSessionError",
    "Usage",
    "UserMessageAdded",
    "VerificationError",
    "VerifyReport",
    "WriteTxn",
    "open",
]

__version__ = "0.1.0"


def open(  # noqa: A001 - the package's entry point, like sqlite3.connect / lmdb.open
    path: str | os.PathLike[str],
    *,
    readonly: bool = False,
    blob_threshold: int = 64 * 1024,
    sync: bool = True,
) -> Log:
    """Open (or create) a log.

    Parameters:
        path: a directory for the embedded LMDB store (created if missing), or
            ``":memory:"`` for an in-memory log.
        readonly: open an existing store for reading only.
        blob_threshold: text payloads above this many bytes are stored as blobs.
        sync: fsync every commit (LMDB only).

    Raises:
        StoreError: the store cannot be opened (wrong format, corrupt, no access).
    """
    if isinstance(path, str) and path == ":memory:":
        if readonly:
            raise InvalidEventError("an in-memory log cannot be read-only")
        return Log(MemoryStore(), blob_threshold=blob_threshold)
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidEventError(f"path must be a str or path-like, found {type(path).__name__}")
    store = LMDBStore(path, readonly=readonly, sync=sync)
    try:
        return Log(store, blob_threshold=blob_threshold)
    except BaseException:
        store.close()  # a bad option must not leave the environment open in this process
        raise
