"""Every error turnlog raises on purpose.

Hierarchy::

    KernelError
    ├── InvalidArgumentError (ValueError)   an argument is malformed or out of range
    │   ├── InvalidEventError               an event or batch fails validation
    │   │   ├── EventTooLargeError          a field or the whole event exceeds a limit
    │   │   └── UnknownSessionError (KeyError)  the session does not exist
    │   ├── UnknownEventError (KeyError)    the event (a seq past the head) does not exist
    │   └── PolicyError                     a policy is malformed or inconsistent
    ├── AppendConflictError                 the session head moved (optimistic concurrency)
    ├── IdempotencyError                    a retried batch does not match what was stored
    ├── HistoryMismatchError                the store lacks or differs from what a follower saw
    ├── StoreError                          the backing store failed
    │   ├── StoreFormatError                store written by another format version
    │   ├── StoreCorruptError               unreadable or inconsistent store contents
    │   ├── StoreFullError                  the disk or map cannot grow
    │   ├── StoreReadOnlyError              a write on a read-only store
    │   ├── StoreUnavailableError           the database server cannot be reached in time
    │   ├── StoreNotFoundError              no store at the location (opened with create=False)
    │   └── ForkedProcessError              a handle used in a child after fork()
    ├── BlobNotFoundError (KeyError)        no blob with that hash
    ├── VerificationError                   the chain or a checkpoint does not verify
    ├── DecodeError (ValueError)            bytes that are not a valid turnlog record
    ├── TokenizerError                      a tokenizer cannot be loaded offline
    ├── PackError                           packing cannot satisfy its rules
    │   └── BudgetExceededError             even the mandatory tail does not fit
    ├── ReplayMismatchError                 a replayed request differs from its record
    ├── CompactionError                     a compaction could not be committed
    └── ImportFormatError (ValueError)      a transcript file cannot be imported

The adapters' errors join the tree: ``turnlog.adapters.providers.RenderError`` is
an `InvalidArgumentError`, ``ProviderError`` (and ``ProviderTimeoutError``, also
a ``TimeoutError``; ``EmptySummaryError``) a `KernelError`.

Every message says what was expected, what was found, where (session, seq,
hash prefix) and what to do next. Backend exceptions are converted at the
boundary and chained with ``from`` so the original cause stays visible.
"""

from __future__ import annotations

from typing import NamedTuple

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


class Hint(NamedTuple):
    """What to do next, worded for each way in: the ``turnlog`` command and Python.

    An error raised with a hint ends with it: ``str(error)`` gives the Python
    wording (what a program calling turnlog reads) and `KernelError.cli_message`
    the command's (flags and verbs instead of parameters and methods)::

        ImportFormatError("x.jsonl: not a transcript of a known format",
                          hint=Hint(cli="pass --format FORMAT if you know it",
                                    python="pass format= if you know it"))
    """

    cli: str
    python: str


#: The hint of an error that a check of the whole store would explain.
VERIFY_HINT = Hint(
    cli="run `turnlog verify`", python="run `turnlog verify` (Python: `Log.verify()`)"
)

#: The hint of an error naming a session that does not exist.
SESSIONS_HINT = Hint(
    cli="list sessions with `turnlog sessions`",
    python="list sessions with `turnlog sessions` (Python: `Log.sessions()`)",
)


class KernelError(Exception):
    """Base class of every error turnlog raises on purpose.

    Attributes:
        hint: what to do next in each wording (`Hint`), or None when the message
            itself says it in words that fit both.
    """

    hint: Hint | None = None

    def __init__(self, *args: object, hint: Hint | None = None) -> None:
        super().__init__(*args)
        if hint is not None:
            self.hint = hint

    def _text(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()

    def __str__(self) -> str:
        return self._text() if self.hint is None else f"{self._text()}; {self.hint.python}"

    def cli_message(self) -> str:
        """The message as the ``turnlog`` command prints it: the hint in its wording."""
        return self._text() if self.hint is None else f"{self._text()}; {self.hint.cli}"


class InvalidArgumentError(KernelError, ValueError):
    """An argument is malformed, of the wrong type or out of range; nothing was done."""


class InvalidEventError(InvalidArgumentError):
    """An event or batch failed validation; nothing was written."""


class EventTooLargeError(InvalidEventError):
    """A field or a whole event exceeds a size limit; nothing was written."""


class UnknownSessionError(InvalidEventError, KeyError):
    """The named session has no events."""

    __str__ = KernelError.__str__  # KeyError would quote the message


class UnknownEventError(InvalidArgumentError, KeyError):
    """The named event (a seq past the session's head) does not exist; nothing was done."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PolicyError(InvalidArgumentError):
    """A policy is malformed, out of range or inconsistent."""


class AppendConflictError(KernelError):
    """The session head is not where the caller expected; nothing was written.

    Attributes:
        session: the session appended to.
        expected: the head seq the caller expected (-1 for a new session).
        actual: the head seq found (-1 when the session does not exist).
    """

    def __init__(self, message: str, *, session: str, expected: int, actual: int) -> None:
        super().__init__(message)
        self.session = session
        self.expected = expected
        self.actual = actual


class IdempotencyError(KernelError):
    """A batch reuses idempotency keys inconsistently; nothing was written.

    Raised when only some keys of a batch are already stored, or when a key is
    stored with different content or at a different position.
    """


class HistoryMismatchError(KernelError):
    """The store does not hold the history a follower has seen (`Log.follow`).

    Its head is behind the seq the follower resumes after and no hash was given
    to check the events that will fill the gap, or the event there (or the one
    after it) has another hash: a store restored from an older backup and written
    since, or a replica that serves a different history. Nothing was skipped.

    Attributes:
        session: the session followed.
        seq: the last seq the follower saw.
        head: the seq of the store's head (-1 when the session does not exist).
    """

    def __init__(self, message: str, *, session: str, seq: int, head: int) -> None:
        super().__init__(message)
        self.session = session
        self.seq = seq
        self.head = head


class StoreError(KernelError):
    """The backing store failed; the log is unchanged."""


class StoreFormatError(StoreError):
    """The store was written by a different, incompatible format version."""


class StoreCorruptError(StoreError):
    """The store's contents are unreadable or inconsistent."""


class StoreFullError(StoreError):
    """The store cannot grow (disk full or map size limit); nothing was written."""


class StoreNotFoundError(StoreError):
    """There is no store at the location, and it was opened to read or with
    ``create=False``: nothing was created."""


class StoreReadOnlyError(StoreError):
    """A write was attempted on a store opened read-only."""


class StoreUnavailableError(StoreError):
    """The database server cannot be reached, dropped the connection or timed out.

    The message says whether the write may have been committed (only when the
    connection failed while committing): retry with the same idempotency keys,
    which apply once, or re-read the session head before appending again.
    """


class ForkedProcessError(StoreError):
    """A store handle was used in a child process after ``fork()``."""


class BlobNotFoundError(KernelError, KeyError):
    """No blob with the given hash is stored."""

    __str__ = KernelError.__str__  # KeyError would quote the message


class VerificationError(KernelError):
    """The hash chain, a blob or a checkpoint does not verify."""


class DecodeError(KernelError, ValueError):
    """Bytes that are not a valid turnlog record."""


class TokenizerError(KernelError):
    """A tokenizer cannot be loaded (offline) or is unknown."""


class PackError(KernelError):
    """Packing cannot satisfy its rules."""


class BudgetExceededError(PackError):
    """Even the mandatory tail does not fit the usable budget.

    Attributes:
        needed: tokens the mandatory part needs.
        usable: tokens available for history.
    """

    def __init__(self, message: str, *, needed: int, usable: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.usable = usable


class ReplayMismatchError(KernelError):
    """A replayed request does not reproduce the recorded prompt bytes."""


class CompactionError(KernelError):
    """A compaction could not be produced or committed."""


class ImportFormatError(KernelError, ValueError):
    """A transcript cannot be imported; nothing of that file was appended."""
