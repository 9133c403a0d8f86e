"""The hash chain: how an event's hash is computed and how a chain is checked.

Theory of operation
-------------------
``hash(event) = blake3(prev || canonical(event))`` where ``prev`` is the hash
of the previous event of the session, 32 zero bytes (`GENESIS`) for the first
event of a new session, or the hash of the source event for the first event
of a fork. Each stored record is ``prev (32 bytes) || hash (32 bytes) ||
canonical bytes``; keeping ``prev`` in the record lets a single event be read
and checked on its own, and makes a break in the chain visible as a mismatch
between a record's ``prev`` and its predecessor's ``hash``. This module is
the only one that knows those offsets: the log builds records with
`pack_record` and reads them with `record_hash`, `record_canonical`,
`record_event` and `check_record`.

A chain alone cannot show that its tail was cut off or that it was rewritten
from the start; a `Checkpoint` kept elsewhere can: it fixes the hash at one
seq, and every later state of an intact log still has that hash there.
Checkpoints can be signed (HMAC-SHA256) with a key only the user holds.

Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable

import blake3
import msgspec

from ._canonical import normalize
from ._codec import decode_event, decode_records, encode_canonical, encode_seq
from ._errors import DecodeError, Hint, VerificationError
from ._events import Event

__all__ = ["Checkpoint", "GENESIS", "covered_digest"]

HASH_SIZE = 32
GENESIS = bytes(HASH_SIZE)

_force_setattr = msgspec.structs.force_setattr


def link(prev: bytes, canonical: bytes) -> bytes:
    """The hash of an event whose canonical bytes follow ``prev``."""
    # One call on the concatenation is cheaper than a hasher plus update for
    # event-sized inputs.
    return blake3.blake3(prev + canonical).digest()


def pack_record(prev: bytes, digest: bytes, canonical: bytes) -> bytes:
    """The stored form of one event."""
    return prev + digest + canonical


def chain_records(
    prev: bytes,
    events: Iterable[bytes],
    offset: int,
    first_seq: int,
) -> tuple[list[bytes], bytes]:
    """The records of consecutive events of one session, and the last one's hash.

    ``events`` are canonical bytes encoded at seq 0 (see `with_seq`; ``offset``
    is `seq_offset` of the session); they are moved to ``first_seq``,
    ``first_seq + 1``... and linked after ``prev``. `with_seq`, `link` and
    `pack_record` of each, in one loop (no call per event).
    """
    hasher, encode = blake3.blake3, encode_seq
    records = []
    seq = first_seq
    after = offset + 1
    for data in events:
        canonical = data[:offset] + encode(seq) + data[after:] if seq else data
        digest = hasher(prev + canonical).digest()
        records.append(prev + digest + canonical)
        prev = digest
        seq += 1
    return records, prev


def record_hash(record: bytes) -> bytes:
    """The event hash a stored record holds (its second field)."""
    return bytes(record[HASH_SIZE : 2 * HASH_SIZE])


def record_canonical(record: bytes) -> bytes:
    """The canonical event bytes a stored record holds (after its two hashes)."""
    return bytes(record[2 * HASH_SIZE :])


def unpack_record(record: bytes) -> tuple[bytes, bytes, bytes]:
    """Split a stored record into ``(prev, hash, canonical)``.

    Raises:
        DecodeError: the record is too short to hold two hashes.
    """
    if len(record) <= 2 * HASH_SIZE:
        raise DecodeError(f"stored record is {len(record)} bytes, shorter than its header")
    return (
        bytes(record[:HASH_SIZE]),
        bytes(record[HASH_SIZE : 2 * HASH_SIZE]),
        bytes(record[2 * HASH_SIZE :]),
    )


def record_event(record: bytes) -> Event:
    """Decode a stored record into an `Event` carrying its ``prev`` and ``hash``.

    Raises:
        DecodeError: the record is too short or its bytes are not a valid event.
    """
    if len(record) <= 2 * HASH_SIZE:
        raise DecodeError(f"stored record is {len(record)} bytes, shorter than its header")
    event = decode_event(memoryview(record)[2 * HASH_SIZE :])  # a view: no copy
    _force_setattr(event, "prev", record[:HASH_SIZE])
    _force_setattr(event, "hash", record[HASH_SIZE : 2 * HASH_SIZE])
    return event


def link_checker(position: bytes) -> Callable[[bytes, int, bytes], bool]:
    """The chain check of the stored records of one session, without decoding them.

    ``check(record, seq, prev)`` is True when the record links to ``prev``, its
    stored hash is ``blake3(prev || canonical)``, and its canonical bytes claim
    the position: ``position`` (`position_prefix` of the session) after the
    one-byte map header, then the seq's canonical bytes. `check_record` checks
    all of this and more (that the bytes decode and are canonical), and says
    what is wrong.
    """
    start = 2 * HASH_SIZE + 1
    at = start + len(position)
    hasher, encode = blake3.blake3, encode_seq

    def check(record: bytes, seq: int, prev: bytes) -> bool:
        return (
            len(record) > at
            and record.startswith(prev)
            and record.startswith(position, start)
            and record.startswith(encode(seq), at)
            and record.startswith(
                hasher(record[:HASH_SIZE] + record[2 * HASH_SIZE :]).digest(), HASH_SIZE
            )
        )

    return check


def records_events(records: Iterable[bytes]) -> list[Event]:
    """`record_event` of each stored record, in one loop.

    Raises:
        DecodeError: a record is too short or its bytes are not a valid event.
    """
    return decode_records(records, 2 * HASH_SIZE)


def check_record(
    record: bytes, *, session: str, seq: int, prev: bytes | None
) -> tuple[Event | None, str | None]:
    """Check one stored record in full.

    Returns ``(event, None)`` when the record decodes against the schema, is
    canonical (re-encoding the decoded event gives back exactly its bytes), sits
    at ``(session, seq)``, links to ``prev`` (when given) and its stored hash is
    ``blake3(prev || canonical)``; otherwise ``(event or None, reason)``.
    Together these catch any changed byte of a record.
    """
    if len(record) <= 2 * HASH_SIZE:
        return None, (
            f"record does not decode: stored record is {len(record)} bytes, shorter than its header"
        )
    canonical = record[2 * HASH_SIZE :]
    try:
        event = decode_event(canonical)
    except DecodeError as exc:
        return None, f"record does not decode: {exc}"
    # Encode before the chain fields are set: they are not part of the canonical bytes.
    # Normalized first, so a default-equal field that was written counts as non-canonical.
    normalize(event)
    encoded = encode_canonical(event)
    rec_prev, digest = record[:HASH_SIZE], record[HASH_SIZE : 2 * HASH_SIZE]
    _force_setattr(event, "prev", rec_prev)
    _force_setattr(event, "hash", digest)
    if (
        event.seq == seq
        and event.session == session
        and encoded == canonical
        and (prev is None or rec_prev == prev)
        and blake3.blake3(rec_prev + canonical).digest() == digest
    ):  # link(), inlined
        return event, None
    # Something is wrong: find what, in the order the reasons are documented.
    if event.session != session or event.seq != seq:
        return event, (
            f"record claims position {event.session!r}#{event.seq} but is stored at "
            f"{session!r}#{seq}"
        )
    if encoded != canonical:
        return event, "stored bytes are not the canonical encoding of the event"
    if prev is not None and rec_prev != prev:
        return event, (
            f"prev hash {rec_prev.hex()[:16]} does not match the previous event's "
            f"hash {prev.hex()[:16]}"
        )
    expected = link(rec_prev, canonical)
    if expected != digest:
        return event, (
            f"stored hash {digest.hex()[:16]} does not match the content "
            f"(recomputed {expected.hex()[:16]})"
        )
    return event, None


def covered_digest(hashes: list[bytes]) -> str:
    """Digest over the hashes of the events a compaction covers (hex)."""
    hasher = blake3.blake3()
    for digest in hashes:
        hasher.update(digest)
    return hasher.hexdigest()


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A session's head at one moment, to keep outside the log.

    Attributes:
        session: the session.
        seq: the seq of the head event when the checkpoint was taken.
        hash: that event's hash (hex).
        mac: HMAC-SHA256 (hex) over the other fields, or "" when unsigned.
    """

    session: str
    seq: int
    hash: str
    mac: str = ""

    def message(self) -> bytes:
        """The bytes the MAC covers."""
        return f"turnlog-checkpoint/1\n{self.session}\n{self.seq}\n{self.hash}".encode()

    def check_mac(self, key: bytes | None) -> None:
        """Raise `VerificationError` unless the MAC matches ``key``.

        An unsigned checkpoint verifies only when no key is given.
        """
        if not self.mac:
            if key is not None:
                raise VerificationError(
                    "the checkpoint is not signed but a key was given; "
                    "take a signed checkpoint with `checkpoint --key-file`"
                )
            return
        if key is None:
            raise VerificationError(
                "the checkpoint is signed",
                hint=Hint(
                    cli="pass --key-file FILE with the key it was signed with",
                    python="pass key= with the key it was signed with",
                ),
            )
        if len(self.mac) != 64 or any(c not in "0123456789abcdef" for c in self.mac):
            # compare_digest refuses non-ASCII text (TypeError): judge the form first.
            raise VerificationError(
                f"checkpoint signature must be 64 lowercase hex digits "
                f"(HMAC-SHA256), found {self.mac[:80]!r}: the checkpoint "
                "was altered; take a new one with `checkpoint --key-file`"
            )
        expected = hmac.new(key, self.message(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, self.mac):
            raise VerificationError(
                "checkpoint signature does not match: the checkpoint was "
                "altered or signed with another key"
            )


def sign_checkpoint(checkpoint: Checkpoint, key: bytes) -> Checkpoint:
    """Return ``checkpoint`` with its HMAC-SHA256 under ``key``."""
    mac = hmac.new(key, checkpoint.message(), hashlib.sha256).hexdigest()
    return msgspec.structs.replace(checkpoint, mac=mac)
