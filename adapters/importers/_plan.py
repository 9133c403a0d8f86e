"""What a transcript importer produces before anything is appended: an import plan.

Theory of operation
-------------------
Every format module turns the bytes of one transcript file into a `Parsed`
plan: one `Plan` per turnlog session the file maps to (the main conversation,
dead branches kept as forks, subagents, several sessions appended in one
file), each an ordered list of `Entry` (one event to append) and
`CompactionEntry` (a compaction whose covered span and digest can only be
computed once the events before it are in the log). Nothing here touches a
log: the driver in `transcripts` validates every entry of a file, then appends.

Losslessness rests on one convention. An entry's payload holds the
model-visible content; ``meta`` holds the rest of the source record (its
*residual*: the record with the values that moved into the payload taken
out) under ``raw`` (or ``records`` when several source records were merged
into one event), and records that map to no event at all (metadata lines,
duplicates) ride along in ``before``/``after`` of a neighbouring event. An
exporter puts moved values back into the residual, so import → export →
import gives the same payloads and the same meta. Entries that are derived
from another record (a usage record computed from an assistant message) carry
``derived: true`` and are not exported.

Source positions (``line`` for line-oriented files, ``index`` for JSON
documents) are kept so that an exporter can restore the original record order
across sessions (a Claude Code file interleaves the main line, dead branches
and sidechains).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from turnlog.events import (
    Body,
    CompactionCommitted,
    Event,
    NotificationAdded,
    SystemSectionSet,
    ToolResultAdded,
    UserMessageAdded,
)

__all__ = [
    "BadRecord",
    "CompactionEntry",
    "Entry",
    "ExportSession",
    "Format",
    "JSON_ERRORS",
    "Obj",
    "Parsed",
    "Plan",
    "RawLine",
    "RecordSink",
    "SkippedRecord",
    "decode_or_text",
    "dumps",
    "dumps_sorted",
    "format_time",
    "get_bool",
    "get_dict",
    "get_list",
    "get_str",
    "kind_of",
    "load_document",
    "parse_time",
    "positioned",
    "session_slug",
    "text_of",
    "without",
    "write_lines",
]

#: A decoded JSON object.
Obj = dict[str, Any]

_JSON = msgspec.json.Encoder()
_SORTED = msgspec.json.Encoder(order="sorted")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class BadRecord(Exception):
    """A record that cannot be imported (raised by format parsers, never escapes).

    Parameters:
        where: the record's position, e.g. ``line 17`` or ``history[3]``.
        field: the dotted path of the offending field (``""`` for the whole record).
        reason: what was expected and what was found.
    """

    def __init__(self, where: str, field: str, reason: str) -> None:
        super().__init__(f"{where}: {field or 'record'}: {reason}")
        self.where = where
        self.field = field
        self.reason = reason


class SkippedRecord(msgspec.Struct, frozen=True):
    """A record (or file) left out of an import run with ``skip_bad=True``.

    Attributes:
        source: the file.
        where: the record's position (``line 17``, ``history[3]``; ``""`` for a whole file).
        field: the offending field (``""`` when the record as a whole is bad).
        reason: what was wrong.
    """

    source: str
    where: str
    field: str
    reason: str

    def __str__(self) -> str:
        where = f", {self.where}" if self.where else ""
        what = f", field {self.field}" if self.field else ""
        return f"{self.source}{where}{what}: {self.reason}"


@dataclass
class Entry:
    """One event to append.

    Attributes:
        body: the payload.
        key: the idempotency key, derived from source ids.
        time: microseconds since the epoch (UTC) from the transcript, or None.
        meta: residual source data (JSON-like).
        where: the source position, for error messages.
    """

    body: Body
    key: str
    time: int | None
    meta: Obj
    where: str


@dataclass
class CompactionEntry:
    """A compaction recorded by the source agent; the driver turns it into a
    ``CompactionCommitted(reason="imported")`` covering everything before it
    in the session's lineage, with the digest of the covered events' hashes.
    """

    key: str
    time: int | None
    meta: Obj
    where: str
    summary: str
    summarizer: str
    tokens_before: int = 0
    tokens_after: int = 0
    model: str = ""


@dataclass
class Plan:
    """The entries of one session.

    Attributes:
        natural: the session id the source suggests (used when the caller names none).
        suffix: the id under a caller-given session name (``""`` for the main session).
        entries: events in append order.
        fork: ``(parent plan index, key of the parent entry to fork after)`` for a
            dead branch kept as a fork of the plan it branched from.
        parent: a subagent's link: ``{"plan": index}`` or ``{"session": id}`` plus
            details (``call_id``, ``agent_id``, ``inline``); written into the
            first event's ``meta["parent"]`` with the plan index resolved to a
            session id.
    """

    natural: str
    suffix: str = ""
    entries: list[Entry | CompactionEntry] = field(default_factory=list)
    fork: tuple[int, str] | None = None
    parent: Obj | None = None


@dataclass
class Parsed:
    """What one file maps to."""

    format: str
    plans: list[Plan]
    skipped: list[SkippedRecord] = field(default_factory=list)
    #: images and other binary content to store first: blake3 hex -> (bytes, media type)
    blobs: dict[str, tuple[bytes, str]] = field(default_factory=dict)


@dataclass
class ExportSession:
    """A session handed to an exporter.

    Attributes:
        session: the id.
        events: the session's own events (not what it forked from), with every
            blob-backed text replaced by the blob's full content.
        children: for formats that keep several sessions in one file (Claude
            Code dead branches and inline sidechains), the sessions that
            continue or hang off this one.
        blob: reads a blob by hex hash.
    """

    session: str
    events: list[Event]
    children: list[ExportSession]
    blob: Callable[[str], bytes]


class RecordSink:
    """Collects the records of a plan that map to no event and attaches them
    to the next entry (``meta["before"]``), the last one (``meta["after"]``),
    or, for a plan without any event, to a carrier event that never reaches a
    prompt (an empty ``SystemSectionSet`` named ``<format>.records``)."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.pending: list[Obj] = []

    def hold(self, record: Obj) -> None:
        """Keep ``record`` (``{"line" or "index": position, "record": value}``, or
        ``"text"`` instead of ``"record"`` for a line that is not JSON) for the next entry."""
        self.pending.append(record)

    def attach(self, meta: Obj) -> Obj:
        """Give the held records to the entry whose meta this is; returns ``meta``."""
        if self.pending:
            meta["before"] = self.pending
            self.pending = []
        return meta

    def finish(self, entries: list[Any], *, key: str, time: int | None, where: str) -> None:
        """Place the records still held after the last entry."""
        if not self.pending:
            return
        if entries:
            entries[-1].meta.setdefault("after", []).extend(self.pending)
        else:
            entries.append(
                Entry(
                    SystemSectionSet(name=f"{self.fmt}.records", text=""),
                    key,
                    time,
                    {"carrier": True, "after": self.pending},
                    where,
                )
            )
        self.pending = []


# -- export helpers ---------------------------------------------------------------------
#: Rebuilds the source records of one event group (an event and its ``cont``
#: followers): ``(position or None, record)`` pairs.
Restore = Callable[[list[Event]], list[tuple[object, Obj]]]


def positioned(
    events: list[Event],
    own: Restore,
    *,
    at: str = "line",
) -> list[tuple[int, int, Any]]:
    """Every source record the events hold, as ``(position, order, record)`` sorted
    into source order: attached records (``before``/``after``) and what ``own``
    rebuilds from each event group. Records without a position (events not
    imported) follow the record before them."""
    out: list[tuple[int, int, Any]] = []
    last = 0

    def put(position: object, record: Any) -> None:
        nonlocal last
        if isinstance(position, int) and not isinstance(position, bool):
            last = position
        out.append((last, len(out), record))

    i = 0
    while i < len(events):
        group = [events[i]]
        while i + 1 < len(events) and events[i + 1].meta.get("cont"):
            i += 1
            group.append(events[i])
        meta = group[0].meta
        for held in meta.get("before", ()):
            put(held.get(at), _held(held))
        if not (meta.get("derived") or meta.get("carrier")):
            for position, record in own(group):
                put(position, record)
        for member in group:
            for held in member.meta.get("after", ()):
                put(held.get(at), _held(held))
        i += 1
    out.sort(key=lambda item: (item[0], item[1]))
    return out


class RawLine(str):
    """A source line that was not a valid record (left out with ``skip_bad``), kept
    verbatim so that an export gives it back."""


def _held(held: Obj) -> Any:
    return held["record"] if "record" in held else RawLine(held.get("text", ""))


def write_lines(records: list[tuple[int, int, Any]]) -> bytes:
    """JSON lines of ``positioned`` records (kept raw lines as they were)."""
    return b"".join(
        (record if isinstance(record, RawLine) else dumps(record)).encode() + b"\n"
        for _, _, record in records
    )


# -- JSON helpers ---------------------------------------------------------------------
#: What decoding JSON bytes raises: malformed JSON, text that is not UTF-8, or
#: nesting deeper than the interpreter's recursion limit.
JSON_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


def load_document(data: bytes) -> Any:
    """The JSON document in ``data``.

    Raises:
        BadRecord: ``data`` is not one JSON document.
    """
    try:
        return msgspec.json.decode(data)
    except JSON_ERRORS as exc:
        raise BadRecord("document", "", f"not valid JSON ({exc})") from None


def decode_or_text(text: str) -> Any:
    """``text`` decoded as JSON, or ``text`` itself when it is not JSON."""
    try:
        return msgspec.json.decode(text)
    except JSON_ERRORS:
        return text


def dumps(value: Any) -> str:
    """Compact JSON text (key order kept): for values moved out of a record."""
    return _JSON.encode(value).decode()


def dumps_sorted(value: Any) -> str:
    """Compact JSON text with sorted keys: for text *derived* from values that stay
    in meta, whose key order the log's canonical encoding does not keep."""
    return _SORTED.encode(value).decode()


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "number",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)


def without(obj: Obj, *keys: str) -> Obj:
    """A copy of ``obj`` without ``keys``."""
    return {k: v for k, v in obj.items() if k not in keys}


def count_of(value: object) -> int:
    """A token count from a transcript: a non-negative int, else 0."""
    return (
        value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62
        else 0
    )


def text_of(body: Body) -> str:
    """The one text of a payload that holds one (message, notification, section, tool
    output, compaction summary); ``""`` for the others."""
    if isinstance(body, (UserMessageAdded, NotificationAdded, SystemSectionSet)):
        return body.text
    if isinstance(body, ToolResultAdded):
        return body.output
    if isinstance(body, CompactionCommitted):
        return body.summary
    return ""


def get_str(
    obj: Obj, key: str, where: str, path: str, *, optional: bool = False, default: str = ""
) -> str:
    """``obj[key]`` as a string; BadRecord naming ``path`` when it is something else."""
    value = obj.get(key)
    if value is None and optional:
        return default
    if not isinstance(value, str):
        raise BadRecord(where, path, f"expected a string, found {_kind(value)}")
    return value


def get_dict(obj: Obj, key: str, where: str, path: str, *, optional: bool = False) -> Obj:
    """``obj[key]`` as an object (``{}`` when optional and absent)."""
    value = obj.get(key)
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise BadRecord(where, path, f"expected an object, found {_kind(value)}")
    return value


def get_list(
    obj: Obj,
    key: str,
    where: str,
    path: str,
    *,
    optional: bool = False,
) -> list[Any]:
    """``obj[key]`` as an array (``[]`` when optional and absent)."""
    value = obj.get(key)
    if value is None and optional:
        return []
    if not isinstance(value, list):
        raise BadRecord(where, path, f"expected an array, found {_kind(value)}")
    return value


def get_bool(obj: Obj, key: str, where: str, path: str) -> bool:
    """``obj[key]`` as a boolean (False when absent or null)."""
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRecord(where, path, f"expected true or false, found {_kind(value)}")
    return value


def kind_of(value: object) -> str:
    """The JSON type name of ``value`` (for messages)."""
    return _kind(value)


# -- time ---------------------------------------------------------------------------------
def parse_time(value: object, where: str, path: str) -> int | None:
    """An ISO-8601 timestamp (``Z``, an offset or none: UTC) as microseconds since
    the epoch; None for null or absent. Epoch seconds (a number) are accepted too."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise BadRecord(where, path, "expected an ISO-8601 timestamp, found boolean")
    if isinstance(value, (int, float)):
        if not -(2**62) < value * 1_000_000 < 2**62:
            raise BadRecord(where, path, f"timestamp {value} is out of range")
        return round(value * 1_000_000)
    if not isinstance(value, str):
        raise BadRecord(where, path, f"expected an ISO-8601 timestamp, found {_kind(value)}")
    try:
        moment = _dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise BadRecord(
            where, path, f"expected an ISO-8601 timestamp, found {value[:40]!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return (moment - _EPOCH) // _dt.timedelta(microseconds=1)


def format_time(micros: int | None, *, naive: bool = False, places: int = 3) -> str:
    """Microseconds since the epoch as ISO-8601 UTC (``Z``-suffixed unless ``naive``)."""
    moment = _EPOCH + _dt.timedelta(microseconds=micros or 0)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if places:
        text += f".{moment.microsecond:06d}"[: places + 1]
    return text if naive else text + "Z"


_UNSAFE = re.compile(r"[^A-Za-z0-9._:-]+")


def session_slug(text: str) -> str:
    """``text`` made safe and short for use inside a session id."""
    return _UNSAFE.sub("-", text).strip("-")[:120] or "session"


def natural_id(source: str, data: bytes) -> str:
    """A session id for a transcript that names none: its file stem and a digest
    of its bytes (two runs on one task stay apart)."""
    stem = session_slug(source.replace("\\", "/").rsplit("/", 1)[-1].split(".", 1)[0])
    return f"{stem}-{hashlib.blake2b(data, digest_size=4).hexdigest()}"


@dataclass(frozen=True)
class Format:
    """One transcript format, declared by its module as providers declare a `Provider`.

    Attributes:
        name: the format's name (`turnlog.adapters.importers.FORMATS`, ``--format``; also
            written into the first imported event's meta, ``meta["import"]["format"]``).
            A wire format a provider speaks too has the provider's name
            (``openai-chat``), one spelling everywhere.
        parse: the file's bytes, its name and ``skip_bad`` to an import plan.
        export: a session back to a file of this format.
        children: the file also holds the session's forks and inline subagents.
        aliases: earlier spellings of ``name``, accepted wherever a format is named and
            found in the meta of events imported before the rename (their bytes never
            change; `format_name` maps them).
    """

    name: str
    parse: Callable[[bytes, str, bool], Parsed]
    export: Callable[[ExportSession], bytes]
    children: bool = False
    aliases: tuple[str, ...] = ()
