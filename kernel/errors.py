"""Every error turnlog raises on purpose, under the one base class `KernelError`.

The hierarchy is drawn in the docstring of `KernelError`'s module; catch
`KernelError` for all of them, or a subclass for one failure::

    from turnlog.errors import AppendConflictError, UnknownSessionError
"""

from __future__ import annotations

from ._errors import (
    AppendConflictError,
    BlobNotFoundError,
    BudgetExceededError,
    CompactionError,
    DecodeError,
    EventTooLargeError,
    ForkedProcessError,
    Hint,
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
    UnknownEventError,
    UnknownSessionError,
    VerificationError,
)

__all__ = [
    "AppendConflictError",
    "BlobNotFoundError",
    "BudgetExceededError",
    "CompactionError",
    "DecodeError",
    "EventTooLargeError",
    "ForkedProcessError",
    "Hint",
    "HistoryMismatchError",
    "IdempotencyError",
    "ImportFormatError",
    "InvalidArgumentError",
    "InvalidEventError",
    "KernelError",
    "PackError",
    "PolicyError",
    "ReplayMismatchError",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatError",
    "StoreFullError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "StoreUnavailableError",
    "TokenizerError",
    "UnknownEventError",
    "UnknownSessionError",
    "VerificationError",
]
