"""Canonical encoding, strict validation and blob extraction of events.

Theory of operation
-------------------
The canonical bytes of an event are its msgpack encoding by one msgspec
Encoder with deterministic order: struct fields in definition order, map keys
of ``meta`` sorted, fields equal to their default omitted (``prev`` and
``hash`` are therefore never part of them). docs/events.md specifies the
format precisely enough to re-implement it in another language.

msgspec checks types when it *decodes*, not when a Struct is constructed, so
validation is a round trip: encode, decode strictly against the schema, then
check what the schema cannot say (finite floats, ``meta`` shape and depth,
sizes). Anything that fails raises an `InvalidEventError` subclass that names
the field, before the store is touched.

Large text payloads move to blobs: the event keeps a `BlobRef` and a head/tail
preview, so the log stays small and packing still has text to work with
without reading the blob (packing does no I/O).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

import blake3
import msgspec

from ._canonical import normalize
from ._errors import DecodeError, EventTooLargeError, InvalidEventError
from ._events import (
    KINDS,
    AssistantMessageAdded,
    BlobRef,
    Body,
    Event,
    NotificationAdded,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from ._validation import check_type, invalid

__all__ = ["event_from_json", "event_to_json"]

MAX_META_DEPTH = 32

_ENCODER = msgspec.msgpack.Encoder(order="deterministic")
_EVENT_DECODER = msgspec.msgpack.Decoder(Event)
_BODY_DECODER = msgspec.msgpack.Decoder(Body)
_JSON_ENCODER = msgspec.json.Encoder(order="deterministic")
_PAYLOAD_TYPES = tuple(KINDS.values())


def _holds_float(info: msgspec.inspect.Type, seen: frozenset[type] = frozenset()) -> bool:
    mi = msgspec.inspect
    if isinstance(info, mi.FloatType):
        return True
    if isinstance(info, mi.StructType):
        return info.cls not in seen and any(
            _holds_float(f.type, seen | {info.cls}) for f in info.fields
        )
    if isinstance(info, mi.UnionType):
        return any(_holds_float(t, seen) for t in info.types)
    if isinstance(info, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        return _holds_float(info.item_type, seen)
    if isinstance(info, mi.TupleType):
        return any(_holds_float(t, seen) for t in info.item_types)
    if isinstance(info, mi.DictType):
        return _holds_float(info.key_type, seen) or _holds_float(info.value_type, seen)
    if isinstance(info, mi.Metadata):
        return _holds_float(info.type, seen)
    return False


# Decoding turns an int given for a float field into a float, which encodes to other
# bytes; events of these kinds are therefore always re-encoded from the validated copy.
_FLOAT_KINDS = frozenset(
    cls for cls in _PAYLOAD_TYPES if _holds_float(msgspec.inspect.type_info(cls))
)


def _blob_ref_keys(
    info: msgspec.inspect.Type, key: str | None, seen: set[type], found: set[str | None]
) -> None:
    """Collect the map keys under which a `BlobRef` can sit (None: not under a key)."""
    mi = msgspec.inspect
    if isinstance(info, mi.StructType):
        if info.cls is BlobRef:
            found.add(key)
        elif info.cls not in seen:
            seen.add(info.cls)
            for field in info.fields:
                _blob_ref_keys(field.type, field.encode_name, seen, found)
    elif isinstance(info, mi.UnionType):
        for t in info.types:
            _blob_ref_keys(t, key, seen, found)
    elif isinstance(info, mi.Metadata):
        _blob_ref_keys(info.type, key, seen, found)
    elif isinstance(info, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        _blob_ref_keys(info.item_type, None, seen, found)
    elif isinstance(info, mi.TupleType):
        for t in info.item_types:
            _blob_ref_keys(t, None, seen, found)
    elif isinstance(info, mi.DictType):
        _blob_ref_keys(info.value_type, None, seen, found)


_REF_KEYS: set[str | None] = set()
_blob_ref_keys(msgspec.inspect.type_info(Event), None, set(), _REF_KEYS)
# Every ref of the schema is the value of a field named "blob" or an item of an array
# of refs (None: StateSaved.blobs), and wherever it sits a ref holds its "hash" as 64
# hex digits (a msgpack str8 of 64), so canonical bytes without that key and value
# header hold no ref (if the schema ever changes that, every event is searched). The
# longer needle is found faster than the key "blob" alone.
_REF_KEY = (
    b""
    if _REF_KEYS - {"blob", None} or "hash" not in BlobRef.__struct_fields__
    else (_ENCODER.encode("hash") + _ENCODER.encode("0" * 64)[:2])
)


def may_hold_blob_refs(data: bytes) -> bool:
    """False when the canonical bytes ``data`` (or a record ending in them) hold no `BlobRef`.

    A cheap filter before decoding refs: True may still mean none.
    """
    return _REF_KEY in data


def encode_canonical(event: Event) -> bytes:
    """The canonical bytes of ``event`` (its ``prev`` and ``hash`` must be empty)."""
    return _ENCODER.encode(event)


def encode_event(event: Event) -> tuple[Event, bytes]:
    """Validate a whole event in one round trip; return the copy and its canonical bytes.

    ``event`` must have empty ``prev``/``hash`` and a payload of one of the
    kinds (check that first: a dict standing in for a payload could decode).
    The event is encoded once and decoded strictly against the schema. Its
    canonical bytes are those of the validated copy; they equal the first
    encoding unless validation changed a value (an int given for a float
    field, a dict standing in for a nested struct), in which case the copy is
    encoded again. The bytes then never depend on how the caller built the
    event.

    Raises:
        InvalidEventError: the event does not fit the schema; `validate_body`
            names the offending payload field.
    """
    try:
        data = _ENCODER.encode(event)
        checked: Event = _EVENT_DECODER.decode(data)
    except UnicodeEncodeError as exc:
        raise InvalidEventError(
            f"text is not valid UTF-8 ({exc.reason} at position "
            f"{exc.start}); remove lone surrogates"
        ) from exc
    except (OverflowError, TypeError, ValueError) as exc:  # msgspec errors are ValueErrors
        raise InvalidEventError(f"cannot encode event: {exc}") from exc
    try:
        same = type(checked.body) not in _FLOAT_KINDS and checked == event
    except Exception:  # a str or int subclass with an odd __eq__
        same = False
    # Fields equal to their default must be omitted whatever object holds the value.
    if normalize(checked) or not same:
        data = _ENCODER.encode(checked)
    body = checked.body
    # Only a message with two calls or more can repeat an id (of two parts, both calls).
    if (
        type(body) is AssistantMessageAdded
        and len(parts := body.parts) > 1
        and (len(parts) > 2 or (type(parts[0]) is ToolCall and type(parts[1]) is ToolCall))
    ):
        _check_call_ids(body)
    return checked, data


def _check_call_ids(body: AssistantMessageAdded) -> None:
    """Refuse two tool calls with one id in a message: a result names the call it
    answers by id, so it could not say which of the two it answers."""
    ids = [part.id for part in body.parts if type(part) is ToolCall]
    if len(ids) != len(set(ids)):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise InvalidEventError(
            f"assistant message has several tool calls with id "
            f"{twice[0]!r}; give every call of a message its own id"
        )


def seq_offset(session: str) -> int:
    """Where the seq value sits in the canonical bytes of every event of ``session``.

    The envelope is a map whose first entries are always ``session`` and
    ``seq`` (required fields, in definition order) behind a one-byte header
    (an event has fewer than 16 fields). The seq of an event encoded at seq 0
    is therefore the single byte ``0x00`` at this offset, and replacing it by
    the encoding of another seq gives that event's canonical bytes.
    """
    return 1 + 8 + len(_ENCODER.encode(session)) + 4


def position_prefix(session: str) -> bytes:
    """The bytes every canonical event of ``session`` holds between its one-byte map
    header and its seq value (see `seq_offset`)."""
    return _ENCODER.encode("session") + _ENCODER.encode(session) + _ENCODER.encode("seq")


#: The canonical bytes of a seq value (the encoder's method itself: no Python call per event).
encode_seq: Callable[[int], bytes] = _ENCODER.encode


def with_seq(data: bytes, offset: int, seq: int) -> bytes:
    """The canonical bytes ``data`` of an event at seq 0, moved to ``seq``.

    ``offset`` is `seq_offset` of the event's session.
    """
    return data[:offset] + _ENCODER.encode(seq) + data[offset + 1 :]


def decode_event(data: bytes | memoryview) -> Event:
    """Decode canonical bytes into an `Event` (with empty ``prev``/``hash``).

    Raises:
        DecodeError: the bytes are not a valid event of this schema.
    """
    try:
        event: Event = _EVENT_DECODER.decode(data)
    except (
        msgspec.DecodeError,
        msgspec.ValidationError,
        UnicodeDecodeError,
        RecursionError,
    ) as exc:  # msgspec lets bad UTF-8 and deep nesting through as-is
        raise DecodeError(f"not a valid turnlog event: {exc}") from exc
    if event.meta:
        _check_decoded_meta(event.meta)
    return event


def decode_records(records: Iterable[bytes], skip: int) -> list[Event]:
    """`decode_event` of each record's bytes after its first ``skip`` bytes, in
    one loop (no call per record), with the two hashes before them set as
    ``prev`` and ``hash``.

    Raises:
        DecodeError: a record does not decode (`decode_event` names why).
    """
    decode, setattr_ = _EVENT_DECODER.decode, msgspec.structs.force_setattr
    half = skip // 2
    events: list[Event] = []
    append = events.append
    try:
        for record in records:
            event: Event = decode(memoryview(record)[skip:])
            if event.meta:
                _check_decoded_meta(event.meta)
            setattr_(event, "prev", record[:half])
            setattr_(event, "hash", record[half:skip])
            append(event)
    except (
        msgspec.DecodeError,
        msgspec.ValidationError,
        UnicodeDecodeError,
        RecursionError,
    ) as exc:
        raise DecodeError(f"not a valid turnlog event: {exc}") from exc
    return events


def _check_decoded_meta(meta: dict[str, Any]) -> None:
    """Decoded ``meta`` must be what `validate_meta` accepts at append: msgpack can
    also carry non-str keys, bytes, extension types, NaN or deep nesting, which
    would not re-encode canonically."""
    try:
        _walk_meta(meta, "meta", 0)
    except InvalidEventError as exc:
        raise DecodeError(f"not a valid turnlog event: {exc}") from exc


def decode_body(data: bytes) -> Body:
    """Decode the msgpack of one payload (used by fuzzing and importers)."""
    try:
        body: Body = _BODY_DECODER.decode(data)
    except (
        msgspec.DecodeError,
        msgspec.ValidationError,
        UnicodeDecodeError,
        RecursionError,
    ) as exc:  # msgspec lets bad UTF-8 and deep nesting through as-is
        raise DecodeError(f"not a valid turnlog payload: {exc}") from exc
    return body


#: Longest session id an append takes, in UTF-8 bytes, on every backend.
MAX_SESSION_BYTES = 256
#: Longest idempotency key, in UTF-8 bytes, on every backend. A session id, a NUL and
#: a key make one key of the LMDB store's index, and LMDB keys hold at most 511 bytes;
#: the limits are the log's, so that what one backend stores every backend stores.
MAX_KEY_BYTES = 254
#: The most bytes one append (or `Log.put_blob`) stores: its events' records and the
#: blobs it moves out of them, on every backend. PostgreSQL takes no value (the
#: array of a batch's records, a blob) of 1 GiB or more.
MAX_BATCH_BYTES = 2**29


def check_id_bytes(what: str, value: str, limit: int, advice: str) -> None:
    """Refuse a (valid UTF-8) id longer than ``limit`` UTF-8 bytes."""
    if len(value) * 4 > limit and (size := len(value.encode())) > limit:
        raise InvalidEventError(
            f"{what} must have at most {limit} UTF-8 bytes, found {size} "
            f"({len(value)} characters, {value[:24]!r}...); {advice}"
        )


#: A control character: what a session id may not hold (one regex search, not a step
#: per character: ids are checked on every append and read).
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def validate_session_id(session: object) -> str:
    """Return ``session`` if it is a usable session id, else raise `InvalidEventError`.

    Reading takes any id of 1 to 256 characters (a store written before the byte
    limit may hold longer ones); an append also checks `MAX_SESSION_BYTES`."""
    if not isinstance(session, str):
        invalid(
            "session id",
            "a str of 1 to 256 characters",
            session,
            with_type=True,
            error=InvalidEventError,
        )
    if not 1 <= len(session) <= 256:
        invalid("session id", "a str of 1 to 256 characters", session, error=InvalidEventError)
    if _CONTROL.search(session):
        raise InvalidEventError(f"session id {session!r} contains a control character")
    try:
        session.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEventError(f"session id {session!r} is not valid UTF-8: {exc.reason}") from exc
    return session


def validate_body(body: object, *, where: str = "event") -> Body:
    """Check a payload against the schema; return an equal, validated copy.

    Raises:
        InvalidEventError: unknown kind, wrong type, out-of-range number,
            non-finite float, or text that is not valid UTF-8 (lone surrogates).
    """
    if not isinstance(body, _PAYLOAD_TYPES):
        check_type(
            body,
            _PAYLOAD_TYPES,
            where,
            what=f"one of the payload kinds ({', '.join(sorted(KINDS))})",
            hint="wrap payloads in their event class, e.g. UserMessageAdded(text=...)",
            error=InvalidEventError,
        )
    try:
        data = _ENCODER.encode(body)
    except UnicodeEncodeError as exc:
        raise InvalidEventError(
            f"{where}: text is not valid UTF-8 ({exc.reason} at "
            f"position {exc.start}); remove lone surrogates"
        ) from exc
    except (OverflowError, TypeError, ValueError) as exc:
        raise InvalidEventError(f"{where}: cannot encode payload: {exc}") from exc
    try:
        checked: Body = _BODY_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidEventError(f"{where}: {exc}") from exc
    # The only payload floats are a PolicySet's, which Policy.__post_init__
    # checks for finiteness during the decode above.
    normalize(checked)
    return checked


def validate_meta(meta: object, *, where: str = "event", max_bytes: int) -> dict[str, Any]:
    """Check ``meta``: str keys, JSON-like values, finite floats, bounded depth and size."""
    if not isinstance(meta, dict):
        invalid(f"{where}: meta", "a dict", meta, with_type=True, error=InvalidEventError)
    _walk_meta(meta, f"{where}.meta", 0)
    try:
        size = len(_ENCODER.encode(meta))
    except UnicodeEncodeError as exc:
        raise InvalidEventError(f"{where}.meta: text is not valid UTF-8 ({exc.reason})") from exc
    except (OverflowError, TypeError) as exc:
        raise InvalidEventError(f"{where}.meta: cannot encode: {exc}") from exc
    if size > max_bytes:
        raise EventTooLargeError(
            f"{where}.meta is {size} bytes, the limit is {max_bytes}; "
            "store large data as a blob and keep its ref in meta"
        )
    return meta


def _walk_meta(value: Any, path: str, depth: int) -> None:
    if depth > MAX_META_DEPTH:
        raise InvalidEventError(f"{path}: nested deeper than {MAX_META_DEPTH} levels")
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise InvalidEventError(f"{path}: integer {value} is out of the 64-bit range")
        return
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise InvalidEventError(f"{path}: {value} is not a finite number")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _walk_meta(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, item in value.items():
            check_type(k, str, f"{path}: a key", error=InvalidEventError)
            _walk_meta(item, f"{path}.{k}", depth + 1)
        return
    raise InvalidEventError(
        f"{path}: unsupported type {type(value).__name__} (use JSON-like "
        "values: None, bool, int, float, str, list, dict)"
    )


def make_preview(text: str, *, head: int, tail: int, ref: BlobRef) -> str:
    """Head and tail of ``text`` around a marker naming the blob that holds it all."""
    omitted = len(text) - head - tail
    marker = (
        f"\n[... {omitted} characters omitted; the full output ({ref.size} bytes) is "
        f"blob {ref.hash} ...]\n"
    )
    return text[:head] + marker + text[len(text) - tail :]


# Payload kinds whose large text moves to a blob -> the field holding that text.
_BLOB_TEXT: dict[type[Any], str] = {
    ToolResultAdded: "output",
    NotificationAdded: "text",
    UserMessageAdded: "text",
}
#: Payload kind -> the field whose large text `extract_blobs` moves ("" for none).
BLOB_FIELDS = {cls: _BLOB_TEXT.get(cls, "") for cls in _PAYLOAD_TYPES}


def extract_blobs(
    body: Body,
    *,
    threshold: int,
    preview_head: int,
    preview_tail: int,
) -> tuple[Body, list[tuple[str, bytes]]]:
    """Move oversized text of ``body`` to blobs.

    Returns the payload to store (with `BlobRef` and preview) and the blobs to
    write as ``(hex hash, bytes)`` pairs. Tool outputs, notifications and user
    messages larger than ``threshold`` UTF-8 bytes are moved.
    """
    field = BLOB_FIELDS.get(type(body))
    if field is None:  # not exactly a payload kind: a subclass?
        field = next((f for cls, f in _BLOB_TEXT.items() if isinstance(body, cls)), "")
    if not field:
        return body, []
    text: str = getattr(body, field)
    if body.blob is not None or len(text) <= threshold // 4:  # type: ignore[union-attr]
        return body, []
    data = text.encode("utf-8")
    if len(data) <= threshold:
        return body, []
    digest = blake3.blake3(data).hexdigest()
    ref = BlobRef(hash=digest, size=len(data))
    preview = make_preview(text, head=preview_head, tail=preview_tail, ref=ref)
    return msgspec.structs.replace(body, **{field: preview, "blob": ref}), [(digest, data)]


def event_to_json(event: Event) -> bytes:
    """One JSON object for an event, hashes as hex (the export line format)."""
    raw = msgspec.to_builtins(event)
    raw["prev"] = event.prev.hex()
    raw["hash"] = event.hash.hex()
    return _JSON_ENCODER.encode(raw)


def event_from_json(line: bytes | str) -> Event:
    """Parse an export line back into an `Event` (hashes included).

    Raises:
        DecodeError: the line is not a valid exported event.
    """
    try:
        raw = msgspec.json.decode(line)
        if not isinstance(raw, dict):
            raise DecodeError("an exported event must be a JSON object")
        prev = bytes.fromhex(raw.pop("prev", ""))
        digest = bytes.fromhex(raw.pop("hash", ""))
        event = msgspec.convert(raw, Event)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"not a valid exported event: {exc}") from exc
    if event.meta:
        _check_decoded_meta(event.meta)
    msgspec.structs.force_setattr(event, "prev", prev)
    msgspec.structs.force_setattr(event, "hash", digest)
    return event
