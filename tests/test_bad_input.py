"""Every public entry point validates its input and fails without touching the store.

One table, `CASES`, lists the bad inputs: what was tried, through which entry
point, which `KernelError` subclass must come out and a word its message must
contain (so the message says what was wrong). Each case runs against every
backend on a store holding a few events (one with a blob, a keyed batch), and
the store must be byte for byte the same afterwards. The bad-input section of
``docs/reliability.md`` is rendered from the same table (``python
tests/test_bad_input.py --write`` rewrites it) and a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
import turnlog
from support import LogFactory, backend_params, dump
from turnlog import Draft, KernelError, Log, Policy
from turnlog.errors import (
    AppendConflictError,
    BlobNotFoundError,
    EventTooLargeError,
    IdempotencyError,
    InvalidArgumentError,
    InvalidEventError,
    PolicyError,
    StoreError,
    StoreNotFoundError,
    UnknownSessionError,
    VerificationError,
)
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    CompactionPartSummarized,
    Event,
    EventsPinned,
    MemoryChanged,
    PolicySet,
    ResponseReceived,
    SessionForked,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolsSet,
    Usage,
    UserMessageAdded,
)
from turnlog.log import NEW_SESSION, Checkpoint
from turnlog.memories import MemoryManager, Recaller
from turnlog.packing import ModelTable
from turnlog.stores import LMDBStore, PostgresStore

NAN = float("nan")
INF = float("inf")
HUGE = "x" * (9 * 2**20)  # above the default max_event_bytes (8 MiB) after blob extraction
KEY = b"checkpoint key"
DOC = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"

Call = Callable[[Log, Path], object]


def _smuggled(policy: Policy, **fields: object) -> Policy:
    """A policy carrying values its constructor refuses (Policy checks its own fields
    since 0.3.0), built around that check to reach the append's own validation."""
    for name, value in fields.items():
        msgspec.structs.force_setattr(policy, name, value)
    return policy


@dataclass(frozen=True)
class Case:
    """One bad input: ``call(log, tmp_path)`` must raise exactly ``error``."""

    tried: str
    entry: str
    call: Call
    error: type[KernelError]
    hint: str  # a word the message must contain (case-insensitive)


def um(text: str = "hello") -> UserMessageAdded:
    """A user message."""
    return UserMessageAdded(text=text)


def tool(**fields: object) -> ToolResultAdded:
    """A tool result with defaults for the required fields, overridden by ``fields``."""
    base: dict[str, object] = {"call_id": "c1", "tool_name": "bash", "output": "ok"}
    base.update(fields)
    return ToolResultAdded(**base)  # type: ignore[arg-type]


def draft(**fields: object) -> Draft:
    """A user message draft with envelope ``fields``."""
    return Draft(body=um(), **fields)  # type: ignore[arg-type]


def nested(depth: int, leaf: object = 1) -> object:
    """A dict nested ``depth`` levels deep."""
    value = leaf
    for _ in range(depth):
        value = {"d": value}
    return value


def nested_list(depth: int) -> object:
    """A list nested ``depth`` levels deep."""
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def self_referencing() -> dict[str, object]:
    """A dict that contains itself."""
    loop: dict[str, object] = {}
    loop["self"] = loop
    return loop


def nan_policy() -> Policy:
    """A policy whose price was forced to NaN after construction (bypassing its checks)."""
    policy = Policy()
    msgspec.structs.force_setattr(policy, "input_price", NAN)
    return policy


class Alien(msgspec.Struct, tag="user"):
    """Looks like a payload (same tag, same field) but is not a turnlog payload class."""

    text: str


def append(session: object, events: object, **options: object) -> Call:
    """``log.append(session, events, **options)``."""
    return lambda log, _: log.append(session, events, **options)  # type: ignore[arg-type]


def body(payload: object) -> Call:
    """Append one payload to the prepared session."""
    return append("s", payload)


def envelope(**fields: object) -> Call:
    """Append one draft with the given envelope fields to the prepared session."""
    return append("s", [draft(**fields)])


def meta(value: object) -> Call:
    """Append one draft with ``meta=value``."""
    return envelope(meta=value)


def signed(log: Log) -> Checkpoint:
    """A checkpoint of the prepared session signed with `KEY`."""
    return log.checkpoint("s", key=KEY)


CASES: list[Case] = [
    # -- session ids, every entry point that takes one -------------------------------------
    Case("session id is an int", "Log.append", append(5, um()), InvalidEventError, "session id"),
    Case("session id is None", "Log.append", append(None, um()), InvalidEventError, "session id"),
    Case("session id is bytes", "Log.append", append(b"s", um()), InvalidEventError, "session id"),
    Case("session id is empty", "Log.append", append("", um()), InvalidEventError, "1 to 256"),
    Case(
        "session id of 257 characters",
        "Log.append",
        append("s" * 257, um()),
        InvalidEventError,
        "1 to 256",
    ),
    Case(
        "session id of 256 characters, 512 UTF-8 bytes (é)",
        "Log.append",
        append("é" * 256, um()),
        InvalidEventError,
        "256 UTF-8 bytes",
    ),
    Case(
        "session id of 128 emoji, 512 UTF-8 bytes",
        "Log.append",
        append("🙂" * 128, um()),
        InvalidEventError,
        "256 UTF-8 bytes",
    ),
    Case(
        "session id of 257 UTF-8 bytes",
        "Log.append",
        append("é" + "s" * 255, um()),
        InvalidEventError,
        "256 UTF-8 bytes",
    ),
    Case(
        "NUL in session id",
        "Log.append",
        append("a\x00b", um()),
        InvalidEventError,
        "control character",
    ),
    Case(
        "newline in session id",
        "Log.append",
        append("a\nb", um()),
        InvalidEventError,
        "control character",
    ),
    Case(
        "DEL in session id",
        "Log.append",
        append("a\x7fb", um()),
        InvalidEventError,
        "control character",
    ),
    Case(
        "lone surrogate in session id",
        "Log.append",
        append("s\ud800", um()),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "session id is an int",
        "Log.read",
        lambda log, _: log.read(5),  # type: ignore[arg-type]
        InvalidEventError,
        "session id",
    ),
    Case(
        "lone surrogate in session id",
        "Log.read",
        lambda log, _: log.read("\udc00"),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "session id is None",
        "Log.get",
        lambda log, _: log.get(None, 0),  # type: ignore[arg-type]
        InvalidEventError,
        "session id",
    ),
    Case(
        "session id is bytes",
        "Log.head",
        lambda log, _: log.head(b"s"),  # type: ignore[arg-type]
        InvalidEventError,
        "session id",
    ),
    Case(
        "lone surrogate in session id",
        "Snapshot.head",
        lambda log, _: _in_snapshot(log, lambda snap: snap.head("\ud800")),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "control character in session id",
        "Log.verify",
        lambda log, _: log.verify("a\x01"),
        InvalidEventError,
        "control character",
    ),
    Case(
        "lone surrogate in session id",
        "Log.checkpoint",
        lambda log, _: log.checkpoint("\ud800"),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "empty session id",
        "Log.lineage",
        lambda log, _: log.lineage(""),
        InvalidEventError,
        "1 to 256",
    ),
    Case(
        "control character in new session id",
        "Log.fork",
        lambda log, _: log.fork("s", 0, "\x1b[31m"),
        InvalidEventError,
        "control character",
    ),
    Case(
        "source session id is an int",
        "Log.fork",
        lambda log, _: log.fork(7, 0, "f"),  # type: ignore[arg-type]
        InvalidEventError,
        "session id",
    ),
    Case(
        "session id is an int",
        "Log.update",
        lambda log, _: log.update(7, lambda head: um()),  # type: ignore[arg-type]
        InvalidEventError,
        "session id",
    ),
    Case(
        "decide is a list of events",
        "Log.update",
        lambda log, _: log.update("s", [um()]),  # type: ignore[arg-type]
        InvalidArgumentError,
        "callable",
    ),
    Case(
        "attempts is 0",
        "Log.update",
        lambda log, _: log.update("s", lambda h: um(), attempts=0),
        InvalidArgumentError,
        "attempts",
    ),
    Case(
        "session id is None",
        "Log.find_key",
        lambda log, _: log.find_key(None, "k"),  # type: ignore[arg-type]
        InvalidEventError,
        "session id",
    ),
    Case(
        "idempotency key is empty",
        "Log.find_key",
        lambda log, _: log.find_key("s", ""),
        InvalidArgumentError,
        "key",
    ),
    # -- what is appended ------------------------------------------------------------------
    Case(
        "plain str instead of a payload",
        "Log.append",
        append("s", "hello"),
        InvalidEventError,
        "payload",
    ),
    Case(
        "plain dict instead of a payload",
        "Log.append",
        append("s", {"type": "user", "text": "hi"}),
        InvalidEventError,
        "payload",
    ),
    Case(
        "None instead of a payload", "Log.append", append("s", None), InvalidEventError, "payload"
    ),
    Case(
        "list of str instead of payloads",
        "Log.append",
        append("s", ["hello"]),
        InvalidEventError,
        "payload kinds",
    ),
    Case(
        "list of dicts instead of payloads",
        "Log.append",
        append("s", [{"type": "user", "text": "hi"}]),
        InvalidEventError,
        "payload kinds",
    ),
    Case(
        "unknown payload class (same tag and fields)",
        "Log.append",
        append("s", [Alien(text="hi")]),
        InvalidEventError,
        "payload kinds",
    ),
    Case(
        "an Event envelope instead of a payload",
        "Log.append",
        append("s", [Event(session="s", seq=0, body=um())]),
        InvalidEventError,
        "payload kinds",
    ),
    Case(
        "Draft whose body is a str",
        "Log.append",
        append("s", [Draft(body="hi")]),  # type: ignore[arg-type]
        InvalidEventError,
        "payload kinds",
    ),
    Case(
        "Draft whose body is a Draft",
        "Log.append",
        append("s", [Draft(body=Draft(body=um()))]),  # type: ignore[arg-type]
        InvalidEventError,
        "payload kinds",
    ),
    Case(
        "a generator of payloads",
        "Log.append",
        append("s", (um() for _ in range(2))),
        InvalidEventError,
        "sequence",
    ),
    Case("empty batch (list)", "Log.append", append("s", []), InvalidEventError, "at least one"),
    Case("empty batch (tuple)", "Log.append", append("s", ()), InvalidEventError, "at least one"),
    Case(
        "batch of 100001 events",
        "Log.append",
        append("s", [um()] * 100_001),
        InvalidEventError,
        "at most",
    ),
    # -- payload fields of the wrong type --------------------------------------------------
    Case(
        "text is an int",
        "Log.append",
        body(UserMessageAdded(text=5)),  # type: ignore[arg-type]
        InvalidEventError,
        "$.text",
    ),
    Case(
        "text is None",
        "Log.append",
        body(UserMessageAdded(text=None)),  # type: ignore[arg-type]
        InvalidEventError,
        "$.text",
    ),
    Case(
        "text is bytes",
        "Log.append",
        body(UserMessageAdded(text=b"hi")),  # type: ignore[arg-type]
        InvalidEventError,
        "$.text",
    ),
    Case(
        "bool field is a str",
        "Log.append",
        body(tool(is_error="yes")),
        InvalidEventError,
        "$.is_error",
    ),
    Case(
        "int field is a str",
        "Log.append",
        body(tool(exit_code="0")),
        InvalidEventError,
        "$.exit_code",
    ),
    Case(
        "int field is a float",
        "Log.append",
        body(tool(exit_code=1.5)),
        InvalidEventError,
        "$.exit_code",
    ),
    Case(
        "required id is empty", "Log.append", body(tool(call_id="")), InvalidEventError, "$.call_id"
    ),
    Case(
        "tuple field is a str",
        "Log.append",
        body(AssistantMessageAdded(parts="hi")),  # type: ignore[arg-type]
        InvalidEventError,
        "$.parts",
    ),
    Case(
        "str inside a tuple of parts",
        "Log.append",
        body(AssistantMessageAdded(parts=("hi",))),  # type: ignore[arg-type]
        InvalidEventError,
        "$.parts[0]",
    ),
    Case(
        "nested part field of the wrong type",
        "Log.append",
        body(AssistantMessageAdded(parts=(TextPart(text=3),))),  # type: ignore[arg-type]
        InvalidEventError,
        "$.parts[0].text",
    ),
    Case(
        "nested spec field of the wrong type",
        "Log.append",
        body(ToolsSet(tools=({"name": 5},))),  # type: ignore[arg-type]
        InvalidEventError,
        "$.tools[0].name",
    ),
    Case(
        "literal field outside its choices",
        "Log.append",
        body(MemoryChanged(op="explode", memory_id="m")),  # type: ignore[arg-type]
        InvalidEventError,
        "$.op",
    ),
    Case(
        "hex hash field that is not hex",
        "Log.append",
        body(CompactionCommitted(first_seq=0, last_seq=0, covered_digest="xyz", summary="s")),
        InvalidEventError,
        "$.covered_digest",
    ),
    Case(
        "policy is a str",
        "Log.append",
        body(PolicySet(policy="strict")),  # type: ignore[arg-type]
        InvalidEventError,
        "$.policy",
    ),
    Case(
        "policy field of the wrong type",
        "Log.append",
        body(PolicySet(policy=_smuggled(Policy(), truncate="yes"))),
        InvalidEventError,
        "$.policy.truncate",
    ),
    # -- numbers out of range --------------------------------------------------------------
    Case(
        "negative seq field",
        "Log.append",
        body(MemoryChanged(op="save", memory_id="m", expires_seq=-1)),
        InvalidEventError,
        "$.expires_seq",
    ),
    Case(
        "negative count in nested usage",
        "Log.append",
        body(ResponseReceived(usage=Usage(input_tokens=-5))),
        InvalidEventError,
        "$.usage.input_tokens",
    ),
    Case(
        "int64 field of 2**63",
        "Log.append",
        body(tool(exit_code=2**63)),
        InvalidEventError,
        "$.exit_code",
    ),
    Case(
        "int field of 2**64 + 5",
        "Log.append",
        body(tool(exit_code=2**64 + 5)),
        InvalidEventError,
        "encode",
    ),
    Case(
        "rewind to a negative seq below -1",
        "Log.append",
        body(SessionRewound(to_seq=-5)),
        InvalidEventError,
        "to_seq",
    ),
    Case(
        "rewind to a seq after itself",
        "Log.append",
        body(SessionRewound(to_seq=99)),
        InvalidEventError,
        "to_seq",
    ),
    Case(
        "pin of a later event",
        "Log.append",
        body(EventsPinned(seqs=(99,))),
        InvalidEventError,
        "earlier",
    ),
    Case(
        "compaction with first_seq > last_seq",
        "Log.append",
        body(CompactionCommitted(first_seq=2, last_seq=1, covered_digest="0" * 64, summary="s")),
        InvalidEventError,
        "first_seq",
    ),
    Case(
        "compaction covering a later event",
        "Log.append",
        body(CompactionCommitted(first_seq=0, last_seq=99, covered_digest="0" * 64, summary="s")),
        InvalidEventError,
        "not earlier",
    ),
    Case(
        "part summary ending before it starts",
        "Log.append",
        body(
            CompactionPartSummarized(
                first_seq=1, last_seq=1, first_offset=9, last_offset=3, summary="s", part=1, parts=2
            )
        ),
        InvalidEventError,
        "after where it ends",
    ),
    Case(
        "part summary covering a later event",
        "Log.append",
        body(CompactionPartSummarized(first_seq=0, last_seq=99, summary="s", part=1, parts=2)),
        InvalidEventError,
        "not earlier",
    ),
    Case(
        "part summary numbered past its count",
        "Log.append",
        body(CompactionPartSummarized(first_seq=0, last_seq=0, summary="s", part=3, parts=2)),
        InvalidEventError,
        "at most parts",
    ),
    # -- forks written by hand -------------------------------------------------------------
    Case(
        "SessionForked after the first event of a batch",
        "Log.append",
        append("new", [um(), SessionForked(from_session="s", from_seq=0, from_hash="0" * 64)]),
        InvalidEventError,
        "SessionForked",
    ),
    Case(
        "SessionForked on an existing session",
        "Log.append",
        lambda log, _: log.append(
            "s", SessionForked(from_session="s", from_seq=0, from_hash=log.get("s", 0).hash.hex())
        ),
        InvalidEventError,
        "first event",
    ),
    Case(
        "SessionForked naming the wrong hash",
        "Log.append",
        append("new", SessionForked(from_session="s", from_seq=0, from_hash="ab" * 32)),
        InvalidEventError,
        "cannot fork",
    ),
    Case(
        "SessionForked from a missing event",
        "Log.append",
        append("new", SessionForked(from_session="nope", from_seq=0, from_hash="ab" * 32)),
        UnknownSessionError,
        "cannot fork",
    ),
    # -- invalid UTF-8 (lone surrogates) ---------------------------------------------------
    Case(
        "lone surrogate in message text",
        "Log.append",
        body(um("bad \ud800 text")),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate in tool output",
        "Log.append",
        body(tool(output="\udfff")),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate in blob-sized output",
        "Log.append",
        body(tool(output="y" * 100_000 + "\ud800")),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate in an assistant part",
        "Log.append",
        body(AssistantMessageAdded(parts=(TextPart(text="\ud83d"),))),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate in a tool call name",
        "Log.append",
        body(AssistantMessageAdded(parts=(ToolCall(id="c", name="\udc80"),))),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate in a system section name",
        "Log.append",
        body(SystemSectionSet(name="\ud800", text="x")),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate in idempotency key",
        "Log.append",
        envelope(key="k\ud800"),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate in causation",
        "Log.append",
        envelope(causation="\udfff"),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate in a meta key",
        "Log.append",
        meta({"\ud800": 1}),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate in a meta value",
        "Log.append",
        meta({"a": "\udc00"}),
        InvalidEventError,
        "UTF-8",
    ),
    Case(
        "lone surrogate deep in meta",
        "Log.append",
        meta({"a": [{"b": "\ud800"}]}),
        InvalidEventError,
        "UTF-8",
    ),
    # -- tool call ids (a result names its call by id) ------------------------------------
    Case(
        "a message of two calls with one id",
        "Log.append",
        body(AssistantMessageAdded(parts=(ToolCall(id="c", name="a"), ToolCall(id="c", name="b")))),
        InvalidEventError,
        "several tool calls with id 'c'",
    ),
    Case(
        "two calls with one id around a text part",
        "Log.append",
        body(
            AssistantMessageAdded(
                parts=(ToolCall(id="c", name="a"), TextPart(text="and"), ToolCall(id="c", name="b"))
            )
        ),
        InvalidEventError,
        "several tool calls with id 'c'",
    ),
    # -- envelope fields -------------------------------------------------------------------
    Case("time is a str", "Log.append", envelope(time="now"), InvalidEventError, "time"),
    Case("time is a float", "Log.append", envelope(time=1.5), InvalidEventError, "time"),
    Case("time is a bool", "Log.append", envelope(time=True), InvalidEventError, "time"),
    Case("time of 2**63", "Log.append", envelope(time=2**63), InvalidEventError, "time"),
    Case("time below -2**63", "Log.append", envelope(time=-(2**63) - 1), InvalidEventError, "time"),
    Case("idempotency key is an int", "Log.append", envelope(key=5), InvalidEventError, "key"),
    Case(
        "idempotency key holding a NUL (PostgreSQL text cannot hold one)",
        "Log.append",
        envelope(key="k\x00"),
        InvalidEventError,
        "NUL",
    ),
    Case(
        "a batch's keys, one holding a NUL",
        "Log.append",
        append("s", [draft(key="ok"), Draft(body=um("x"), key="\x00")]),
        InvalidEventError,
        "NUL",
    ),
    Case("idempotency key is empty", "Log.append", envelope(key=""), InvalidEventError, "key"),
    Case(
        "idempotency key of 257 characters",
        "Log.append",
        envelope(key="k" * 257),
        InvalidEventError,
        "key",
    ),
    Case(
        "idempotency key of 255 bytes",
        "Log.append",
        envelope(key="k" * 255),
        InvalidEventError,
        "254 UTF-8 bytes",
    ),
    Case(
        "idempotency key of 128 characters, 256 UTF-8 bytes (é)",
        "Log.append",
        envelope(key="é" * 128),
        InvalidEventError,
        "254 UTF-8 bytes",
    ),
    Case(
        "session id of 256 characters with a key of 256 characters",
        "Log.append",
        append("s" * 256, [draft(key="k" * 256)]),
        InvalidEventError,
        "254 UTF-8 bytes",
    ),
    Case(
        "causation is an int", "Log.append", envelope(causation=5), InvalidEventError, "causation"
    ),
    Case("meta is a list", "Log.append", meta([1, 2]), InvalidEventError, "meta must be a dict"),
    Case("meta is None", "Log.append", meta(None), InvalidEventError, "meta must be a dict"),
    Case(
        "meta key is an int", "Log.append", meta({1: "a"}), InvalidEventError, "key must be a str"
    ),
    Case(
        "meta value is an object",
        "Log.append",
        meta({"a": object()}),
        InvalidEventError,
        "unsupported type",
    ),
    Case(
        "meta value is bytes",
        "Log.append",
        meta({"a": b"raw"}),
        InvalidEventError,
        "unsupported type",
    ),
    Case(
        "meta value is a set",
        "Log.append",
        meta({"a": {1, 2}}),
        InvalidEventError,
        "unsupported type",
    ),
    Case("NaN in meta", "Log.append", meta({"x": NAN}), InvalidEventError, "finite"),
    Case("inf in a meta list", "Log.append", meta({"x": [1.0, INF]}), InvalidEventError, "finite"),
    Case(
        "-inf deep in meta",
        "Log.append",
        meta({"a": {"b": {"c": -INF}}}),
        InvalidEventError,
        "finite",
    ),
    Case("meta int of 2**64", "Log.append", meta({"n": 2**64}), InvalidEventError, "64-bit"),
    Case(
        "meta int below -2**63",
        "Log.append",
        meta({"n": -(2**63) - 1}),
        InvalidEventError,
        "64-bit",
    ),
    Case(
        "meta dicts nested 40 deep",
        "Log.append",
        meta(nested(40)),
        InvalidEventError,
        "nested deeper",
    ),
    Case(
        "meta lists nested 40 deep",
        "Log.append",
        meta({"l": nested_list(40)}),
        InvalidEventError,
        "nested deeper",
    ),
    Case(
        "meta that contains itself",
        "Log.append",
        meta(self_referencing()),
        InvalidEventError,
        "nested deeper",
    ),
    # -- sizes -----------------------------------------------------------------------------
    Case(
        "9 MiB of assistant text",
        "Log.append",
        body(AssistantMessageAdded(parts=(TextPart(text=HUGE),))),
        EventTooLargeError,
        "limit",
    ),
    Case(
        "9 MiB of tool-call arguments",
        "Log.append",
        body(AssistantMessageAdded(parts=(ToolCall(id="c", name="t", arguments=HUGE),))),
        EventTooLargeError,
        "limit",
    ),
    Case("9 MiB of meta", "Log.append", meta({"big": HUGE}), EventTooLargeError, "limit"),
    # -- NaN and inf in policies -----------------------------------------------------------
    Case(
        "NaN price in Policy",
        "Policy",
        lambda log, _: Policy(input_price=NAN),
        PolicyError,
        "finite",
    ),
    Case(
        "inf price in Policy",
        "Policy",
        lambda log, _: Policy(cache_read_price=INF),
        PolicyError,
        "finite",
    ),
    Case(
        "NaN ratio in Policy",
        "Policy",
        lambda log, _: Policy(truncate_head_ratio=NAN),
        PolicyError,
        "finite",
    ),
    Case(
        "-inf threshold ratio in Policy",
        "Policy",
        lambda log, _: Policy(warning_ratio=-INF),
        PolicyError,
        "finite",
    ),
    Case(
        "NaN in a policy mapping",
        "Policy.from_dict",
        lambda log, _: Policy.from_dict({"input_price": NAN}),
        PolicyError,
        "finite",
    ),
    Case(
        "nan in policy TOML",
        "Policy.from_toml",
        lambda log, _: Policy.from_toml("cache_write_price = nan"),
        PolicyError,
        "finite",
    ),
    Case(
        "negative window in policy TOML",
        "Policy.from_toml",
        lambda log, _: Policy.from_toml("context_window = -5"),
        PolicyError,
        "context_window",
    ),
    Case(
        "window of 2**64 in a policy mapping",
        "Policy.from_dict",
        lambda log, _: Policy.from_dict({"context_window": 2**64}),
        PolicyError,
        "context_window",
    ),
    Case(
        "unknown policy field",
        "Policy.from_dict",
        lambda log, _: Policy.from_dict({"bogus": 1}),
        PolicyError,
        "bogus",
    ),
    Case(
        "policy TOML that is not UTF-8",
        "Policy.from_toml",
        lambda log, _: Policy.from_toml(b"x = '\xff'"),
        PolicyError,
        "UTF-8",
    ),
    Case(
        "a path instead of the TOML text",
        "Policy.from_toml",
        lambda log, tmp: Policy.from_toml(tmp / "policy.toml"),  # type: ignore[arg-type]
        PolicyError,
        "pass its text: Policy.from_toml(Path(path).read_text())",
    ),
    Case(
        "a file name instead of the TOML text",
        "Policy.from_toml",
        lambda log, _: Policy.from_toml("policies/agent.toml"),
        PolicyError,
        "takes the TOML text, not a file name",
    ),
    Case(
        "a file name instead of the TOML text",
        "ModelTable.from_toml",
        lambda log, _: ModelTable.from_toml("models.toml"),
        PolicyError,
        "ModelTable.from_toml(Path(path).read_text())",
    ),
    Case(
        "NaN forced into a policy",
        "Log.append",
        body(PolicySet(policy=nan_policy())),
        InvalidEventError,
        "finite",
    ),
    # -- optimistic concurrency ------------------------------------------------------------
    Case(
        "expected_seq is a str",
        "Log.append",
        append("s", um(), expected_seq="2"),
        InvalidArgumentError,
        "expected_seq",
    ),
    Case(
        "expected_seq is a float",
        "Log.append",
        append("s", um(), expected_seq=2.0),
        InvalidArgumentError,
        "expected_seq",
    ),
    Case(
        "expected_seq is a bool",
        "Log.append",
        append("s", um(), expected_seq=True),
        InvalidArgumentError,
        "expected_seq",
    ),
    Case(
        "expected_seq of -2",
        "Log.append",
        append("s", um(), expected_seq=-2),
        InvalidArgumentError,
        "expected_seq",
    ),
    Case(
        "expected_seq of 2**64",
        "Log.append",
        append("s", um(), expected_seq=2**64),
        InvalidArgumentError,
        "expected_seq",
    ),
    Case(
        "stale expected_seq",
        "Log.append",
        append("s", um(), expected_seq=0),
        AppendConflictError,
        "re-read",
    ),
    Case(
        "expected_seq ahead of the head",
        "Log.append",
        append("s", um(), expected_seq=99),
        AppendConflictError,
        "retry",
    ),
    Case(
        "NEW_SESSION for an existing session",
        "Log.append",
        append("s", um(), expected_seq=NEW_SESSION),
        AppendConflictError,
        "expected_seq",
    ),
    Case(
        "expected_seq 0 for a missing session",
        "Log.append",
        append("new", um(), expected_seq=0),
        AppendConflictError,
        "expected_seq",
    ),
    # -- idempotency -----------------------------------------------------------------------
    Case(
        "same idempotency key twice in one batch",
        "Log.append",
        append("s", [draft(key="dup"), Draft(body=um("other"), key="dup")]),
        InvalidEventError,
        "twice",
    ),
    Case(
        "stored key with different content",
        "Log.append",
        append("s", [Draft(body=um("changed"), key="k0"), Draft(body=um("k1"), key="k1")]),
        IdempotencyError,
        "different content",
    ),
    Case(
        "retry mixing stored and new keys",
        "Log.append",
        append("s", [Draft(body=um("k0"), key="k0"), Draft(body=um("new"), key="new")]),
        IdempotencyError,
        "retried batch",
    ),
    Case(
        "retry mixing a stored key and no key",
        "Log.append",
        append("s", [Draft(body=um("k0"), key="k0"), um("no key")]),
        IdempotencyError,
        "retried batch",
    ),
    Case(
        "stored keys in another order",
        "Log.append",
        append("s", [Draft(body=um("k1"), key="k1"), Draft(body=um("k0"), key="k0")]),
        IdempotencyError,
        "one batch",
    ),
    # -- reads -----------------------------------------------------------------------------
    Case(
        "read of a session id of 512 UTF-8 bytes",
        "Log.read",
        lambda log, _: log.read("é" * 256),
        UnknownSessionError,
        "no session",
    ),
    Case(
        "verify of a session id of 512 UTF-8 bytes",
        "Log.verify",
        lambda log, _: log.verify("🙂" * 128),
        UnknownSessionError,
        "no session",
    ),
    Case(
        "read of an unknown session",
        "Log.read",
        lambda log, _: log.read("nope"),
        UnknownSessionError,
        "no session",
    ),
    Case(
        "negative start",
        "Log.read",
        lambda log, _: log.read("s", -1),
        InvalidArgumentError,
        "start",
    ),
    Case(
        "start is a str",
        "Log.read",
        lambda log, _: log.read("s", "0"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "start",
    ),
    Case(
        "start of 2**64",
        "Log.read",
        lambda log, _: log.read("s", 2**64),
        InvalidArgumentError,
        "start",
    ),
    Case(
        "negative stop",
        "Log.read",
        lambda log, _: log.read("s", 0, -1),
        InvalidArgumentError,
        "stop",
    ),
    Case(
        "stop of 2**64",
        "Log.read",
        lambda log, _: log.read("s", 0, 2**64),
        InvalidArgumentError,
        "stop",
    ),
    Case(
        "unknown event kind",
        "Log.read",
        lambda log, _: log.read("s", kinds=["usr"]),
        InvalidArgumentError,
        "kind names out of",
    ),
    Case(
        "kinds is a single str",
        "Log.read",
        lambda log, _: log.read("s", kinds="user"),
        InvalidArgumentError,
        "kinds must be",
    ),
    Case(
        "kinds is an int",
        "Log.read",
        lambda log, _: log.read("s", kinds=5),  # type: ignore[arg-type]
        InvalidArgumentError,
        "kinds must be",
    ),
    Case(
        "kinds holds a non-str",
        "Log.read",
        lambda log, _: log.read("s", kinds=["user", 1]),  # type: ignore[list-item]
        InvalidArgumentError,
        "kinds must be",
    ),
    Case(
        "read of an unknown session in a snapshot",
        "Snapshot.read",
        lambda log, _: _in_snapshot(log, lambda snap: snap.read("nope")),
        UnknownSessionError,
        "no session",
    ),
    Case(
        "get of an unknown session",
        "Log.get",
        lambda log, _: log.get("nope", 0),
        UnknownSessionError,
        "no event",
    ),
    Case(
        "get beyond the head",
        "Log.get",
        lambda log, _: log.get("s", 99),
        UnknownSessionError,
        "no event",
    ),
    Case("get of seq -1", "Log.get", lambda log, _: log.get("s", -1), InvalidArgumentError, "seq"),
    Case(
        "get of seq 2**64",
        "Log.get",
        lambda log, _: log.get("s", 2**64),
        InvalidArgumentError,
        "seq",
    ),
    Case(
        "get with a str seq",
        "Log.get",
        lambda log, _: log.get("s", "1"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "seq",
    ),
    Case(
        "get with a bool seq",
        "Log.get",
        lambda log, _: log.get("s", True),
        InvalidArgumentError,
        "seq",
    ),
    Case(
        "lineage of an unknown session",
        "Log.lineage",
        lambda log, _: log.lineage("nope"),
        UnknownSessionError,
        "no session",
    ),
    # -- forks -----------------------------------------------------------------------------
    Case(
        "fork of an unknown session",
        "Log.fork",
        lambda log, _: log.fork("nope", 0, "f"),
        UnknownSessionError,
        "no event",
    ),
    Case(
        "fork after a seq beyond the head",
        "Log.fork",
        lambda log, _: log.fork("s", 99, "f"),
        UnknownSessionError,
        "no event",
    ),
    Case(
        "fork at seq -1",
        "Log.fork",
        lambda log, _: log.fork("s", -1, "f"),
        InvalidArgumentError,
        "seq",
    ),
    Case(
        "fork at seq 2**64",
        "Log.fork",
        lambda log, _: log.fork("s", 2**64, "f"),
        InvalidArgumentError,
        "seq",
    ),
    Case(
        "fork into a session id of 512 UTF-8 bytes",
        "Log.fork",
        lambda log, _: log.fork("s", 0, "é" * 256),
        InvalidEventError,
        "256 UTF-8 bytes",
    ),
    Case(
        "fork with a key of 256 UTF-8 bytes",
        "Log.fork",
        lambda log, _: log.fork("s", 0, "f", key="é" * 128),
        InvalidEventError,
        "254 UTF-8 bytes",
    ),
    Case(
        "fork into an existing session",
        "Log.fork",
        lambda log, _: log.fork("s", 0, "s"),
        AppendConflictError,
        "expected_seq",
    ),
    Case(
        "fork with a str time",
        "Log.fork",
        lambda log, _: log.fork("s", 0, "f", time="now"),  # type: ignore[arg-type]
        InvalidEventError,
        "time",
    ),
    # -- verify and checkpoints ------------------------------------------------------------
    Case(
        "verify of an unknown session",
        "Log.verify",
        lambda log, _: log.verify("nope"),
        UnknownSessionError,
        "no session",
    ),
    Case(
        "checkpoint of an unknown session",
        "Log.checkpoint",
        lambda log, _: log.checkpoint("nope"),
        UnknownSessionError,
        "no session",
    ),
    Case(
        "checkpoint key is a str",
        "Log.checkpoint",
        lambda log, _: log.checkpoint("s", key="secret"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "key",
    ),
    Case(
        "checkpoint key is empty",
        "Log.checkpoint",
        lambda log, _: log.checkpoint("s", key=b""),
        InvalidArgumentError,
        "key",
    ),
    Case(
        "checkpoint is a str",
        "Log.verify",
        lambda log, _: log.verify(checkpoint="s#2"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "Checkpoint",
    ),
    Case(
        "checkpoint with a str seq",
        "Log.verify",
        lambda log, _: log.verify(checkpoint=Checkpoint(session="s", seq="2", hash="0" * 64)),  # type: ignore[arg-type]
        InvalidArgumentError,
        "Checkpoint",
    ),
    Case(
        "checkpoint with a short hash",
        "Log.verify",
        lambda log, _: log.verify(checkpoint=Checkpoint(session="s", seq=0, hash="abc")),
        InvalidArgumentError,
        "Checkpoint",
    ),
    Case(
        "checkpoint with an int session",
        "Log.verify",
        lambda log, _: log.verify(checkpoint=Checkpoint(session=5, seq=0, hash="0" * 64)),  # type: ignore[arg-type]
        InvalidEventError,
        "session id",
    ),
    Case(
        "verify key is a str",
        "Log.verify",
        lambda log, _: log.verify(checkpoint=signed(log), key="secret"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "key",
    ),
    Case(
        "signed checkpoint, wrong key",
        "Log.verify",
        lambda log, _: log.verify(checkpoint=signed(log), key=b"wrong"),
        VerificationError,
        "signature",
    ),
    Case(
        "signed checkpoint, no key",
        "Log.verify",
        lambda log, _: log.verify(checkpoint=signed(log)),
        VerificationError,
        "key",
    ),
    Case(
        "signed checkpoint with an altered seq",
        "Log.verify",
        lambda log, _: log.verify(checkpoint=msgspec.structs.replace(signed(log), seq=0), key=KEY),
        VerificationError,
        "signature",
    ),
    Case(
        "signed checkpoint whose mac is non-ASCII",
        "Log.verify",
        lambda log, _: log.verify(
            checkpoint=msgspec.structs.replace(signed(log), mac="é" * 64), key=KEY
        ),
        VerificationError,
        "64 lowercase hex",
    ),
    Case(
        "unsigned checkpoint given a key",
        "Log.verify",
        lambda log, _: log.verify(checkpoint=log.checkpoint("s"), key=KEY),
        VerificationError,
        "not signed",
    ),
    Case(
        "checkpoint of another session",
        "Log.verify",
        lambda log, _: log.verify("other", checkpoint=log.checkpoint("s")),
        InvalidArgumentError,
        "checkpoint is for",
    ),
    # -- blobs -----------------------------------------------------------------------------
    Case(
        "blob hash is bytes",
        "Log.blob",
        lambda log, _: log.blob(b"\x00" * 32),  # type: ignore[arg-type]
        InvalidArgumentError,
        "hex str",
    ),
    Case(
        "blob hash is an int",
        "Log.blob",
        lambda log, _: log.blob(5),  # type: ignore[arg-type]
        InvalidArgumentError,
        "hex str",
    ),
    Case(
        "blob hash is None",
        "Log.blob",
        lambda log, _: log.blob(None),  # type: ignore[arg-type]
        InvalidArgumentError,
        "hex str",
    ),
    Case(
        "blob hash that is not hex",
        "Log.blob",
        lambda log, _: log.blob("zz"),
        BlobNotFoundError,
        "no blob",
    ),
    Case(
        "blob hash of a missing blob",
        "Log.blob",
        lambda log, _: log.blob("0" * 64),
        BlobNotFoundError,
        "no blob",
    ),
    Case(
        "lone surrogate as blob hash",
        "Log.blob",
        lambda log, _: log.blob("\ud800"),
        BlobNotFoundError,
        "no blob",
    ),
    Case(
        "blob data is a str",
        "Log.put_blob",
        lambda log, _: log.put_blob("text"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "bytes",
    ),
    Case(
        "blob data is None",
        "Log.put_blob",
        lambda log, _: log.put_blob(None),  # type: ignore[arg-type]
        InvalidArgumentError,
        "bytes",
    ),
    Case(
        "blob media type is an int",
        "Log.put_blob",
        lambda log, _: log.put_blob(b"x", 5),  # type: ignore[arg-type]
        InvalidEventError,
        "media_type",
    ),
    Case(
        "lone surrogate in blob media type",
        "Log.put_blob",
        lambda log, _: log.put_blob(b"x", "image/\ud800"),
        InvalidEventError,
        "UTF-8",
    ),
    # -- opening ---------------------------------------------------------------------------
    Case(
        "path is an int",
        "turnlog.open",
        lambda log, _: turnlog.open(5),  # type: ignore[arg-type]
        InvalidArgumentError,
        "path",
    ),
    Case(
        "read-only in-memory log",
        "turnlog.open",
        lambda log, _: turnlog.open(":memory:", readonly=True),
        InvalidArgumentError,
        "read-only",
    ),
    Case(
        "blob threshold of 10 bytes",
        "turnlog.open",
        lambda log, tmp: turnlog.open(tmp / "other", blob_threshold=10),
        InvalidArgumentError,
        "blob_threshold",
    ),
    Case(
        "blob threshold is a str",
        "turnlog.open",
        lambda log, _: turnlog.open(":memory:", blob_threshold="big"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "blob_threshold",
    ),
    Case(
        "read-only open of a missing store",
        "turnlog.open",
        lambda log, tmp: turnlog.open(tmp / "missing", readonly=True),
        StoreNotFoundError,
        "no turnlog store",
    ),
    Case(
        "open of a missing store without create",
        "turnlog.open",
        lambda log, tmp: turnlog.open(tmp / "missing", create=False),
        StoreNotFoundError,
        "create=True",
    ),
    Case(
        "path is a file",
        "turnlog.open",
        lambda log, tmp: (tmp / "file").write_text("notes") and turnlog.open(tmp / "file"),
        StoreError,
        "it is a file, and a store is a directory",
    ),
    Case(
        "store is not a Store",
        "Log",
        lambda log, _: Log("store"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "Store",
    ),
    # -- something else where the log goes (an AttributeError later, before) -------------
    Case(
        "log is a path",
        "Packer",
        lambda log, tmp: turnlog.Packer(str(tmp / "store")),  # type: ignore[arg-type]
        InvalidArgumentError,
        "open the log and pass it: Packer(turnlog.open(path))",
    ),
    Case(
        "log is a store",
        "Packer",
        lambda log, _: turnlog.Packer(log.store),  # type: ignore[arg-type]
        InvalidArgumentError,
        "Packer(turnlog.Log(store))",
    ),
    Case(
        "log is a packer",
        "Packer",
        lambda log, _: turnlog.Packer(turnlog.Packer(log)),  # type: ignore[arg-type]
        InvalidArgumentError,
        "Packer(packer.log)",
    ),
    Case(
        "log is a path",
        "Compactor",
        lambda log, _: turnlog.Compactor("./store"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "Compactor(turnlog.open(path))",
    ),
    Case(
        "log is a store",
        "Compactor",
        lambda log, _: turnlog.Compactor(log.store),  # type: ignore[arg-type]
        InvalidArgumentError,
        "Compactor(turnlog.Log(store))",
    ),
    Case(
        "packer is a log",
        "Compactor",
        lambda log, _: turnlog.Compactor(log, log),  # type: ignore[arg-type]
        InvalidArgumentError,
        "must be None or a Packer",
    ),
    Case(
        "log is a path",
        "MemoryManager",
        lambda log, _: MemoryManager("./store"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "MemoryManager(turnlog.open(path))",
    ),
    Case(
        "log is a store",
        "Recaller",
        lambda log, _: Recaller(log.store),  # type: ignore[arg-type]
        InvalidArgumentError,
        "Recaller(turnlog.Log(store))",
    ),
    # -- a pipeline that is not (name, stage) pairs (a TypeError in the first pack) ------
    Case(
        "stages is an int",
        "Packer",
        lambda log, _: turnlog.Packer(log, stages=5),  # type: ignore[arg-type]
        InvalidArgumentError,
        "DEFAULT_STAGES",
    ),
    Case(
        "stages lists names only",
        "Packer",
        lambda log, _: turnlog.Packer(log, stages=["truncate"]),  # type: ignore[list-item]
        InvalidArgumentError,
        "stages[0] must be a (name, stage) pair",
    ),
    Case(
        "a stage that is not callable",
        "turnlog.pack",
        lambda log, _: turnlog.pack(
            turnlog.Packer(log).projection("s", turnlog.packing.get_counter("cl100k_base")),
            Policy(),
            stages=[("truncate", 5)],  # type: ignore[list-item]
        ),
        InvalidArgumentError,
        "stages[0] must be a (name, stage) pair",
    ),
    # -- a mapping where a Policy goes ("'dict' object has no attribute 'resolved'") ------
    Case(
        "policy is a dict",
        "Packer.pack",
        lambda log, _: turnlog.Packer(log).pack("s", policy={"context_window": 8000}),  # type: ignore[arg-type]
        InvalidArgumentError,
        "turnlog.Policy(**fields)",
    ),
    Case(
        "policy is a dict",
        "Replayer.record",
        lambda log, _: turnlog.Replayer(turnlog.Packer(log)).record(
            "s",
            policy={"context_window": 8000},  # type: ignore[arg-type]
        ),
        InvalidArgumentError,
        "must be None or a turnlog.Policy",
    ),
    Case(
        "policy is a dict",
        "Compactor.compact",
        lambda log, _: turnlog.Compactor(log).compact("s", policy={"context_window": 8000}),  # type: ignore[arg-type]
        InvalidArgumentError,
        "must be None or a turnlog.Policy",
    ),
    Case(
        "policy is a path",
        "MemoryManager.consolidate",
        lambda log, _: MemoryManager(log).consolidate(policy="policy.toml"),  # type: ignore[arg-type]
        InvalidArgumentError,
        "turnlog.Policy(context_window=N, ...)",
    ),
    # -- a required argument left out (Python's bare TypeError before) --------------------
    Case(
        "no path",
        "turnlog.open",
        lambda log, _: turnlog.open(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "missing its required argument 'path'; call it as turnlog.open(\"./agent-store\")",
    ),
    Case(
        "path given twice",
        "turnlog.open",
        lambda log, tmp: turnlog.open(tmp / "other", path=tmp / "other"),  # type: ignore[misc]
        InvalidArgumentError,
        "both by position and by name",
    ),
    Case(
        "no store",
        "Log",
        lambda log, _: Log(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "missing its required argument 'store'",
    ),
    Case(
        "no path",
        "LMDBStore",
        lambda log, _: LMDBStore(),  # type: ignore[call-arg]
        InvalidArgumentError,
        'call it as LMDBStore("./agent-store")',
    ),
    Case(
        "no URL",
        "PostgresStore",
        lambda log, _: PostgresStore(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "missing its required argument 'url'",
    ),
    Case(
        "no log",
        "Packer",
        lambda log, _: turnlog.Packer(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "call it as Packer(turnlog.open(path))",
    ),
    Case(
        "no log",
        "Compactor",
        lambda log, _: turnlog.Compactor(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "call it as Compactor(turnlog.open(path))",
    ),
    Case(
        "no packer",
        "Replayer",
        lambda log, _: turnlog.Replayer(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "missing its required argument 'packer'",
    ),
    Case(
        "no log",
        "MemoryManager",
        lambda log, _: MemoryManager(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "missing its required argument 'log'",
    ),
    Case(
        "no log",
        "Recaller",
        lambda log, _: Recaller(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "missing its required argument 'log'",
    ),
    Case(
        "no view and no policy",
        "turnlog.pack",
        lambda log, _: turnlog.pack(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "missing its required arguments 'view' and 'policy'",
    ),
    Case(
        "no body",
        "Draft",
        lambda log, _: Draft(),  # type: ignore[call-arg]
        InvalidArgumentError,
        "missing its required argument 'body'",
    ),
    Case(
        "two bodies by position",
        "Draft",
        lambda log, _: Draft(um(), um()),  # type: ignore[call-arg, arg-type]
        InvalidArgumentError,
        "takes 1 positional argument",
    ),
    Case(
        "body by position and by name",
        "Draft",
        lambda log, _: Draft(um(), body=um()),  # type: ignore[misc]
        InvalidArgumentError,
        "both by position and by name",
    ),
    Case(
        "misspelled option",
        "Draft",
        lambda log, _: Draft(um(), tim=5),  # type: ignore[call-arg]
        InvalidArgumentError,
        "did you mean 'time'",
    ),
]


def _in_snapshot(log: Log, fn: Callable[[turnlog.log.Snapshot], object]) -> object:
    """Run ``fn`` on a snapshot of ``log``."""
    with log.snapshot() as snap:
        return fn(snap)


def case_id(case: Case) -> str:
    """A test id: entry point and what was tried, as one slug."""
    text = f"{case.entry} {case.tried}".lower()
    return "-".join("".join(c if c.isalnum() else " " for c in text).split())


def prepare(log: Log) -> None:
    """The store every case runs against: a few events, a blob, a keyed batch."""
    log.append("s", [um("first"), tool(output="z" * 100_000)])
    log.append("s", [Draft(body=um("k0"), key="k0"), Draft(body=um("k1"), key="k1")])
    log.append("other", um("other session"))


@pytest.fixture(scope="module", params=backend_params())
def prepared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Log]:
    """One prepared log per backend, shared by every case (each case checks it is unchanged)."""
    factory = LogFactory(str(request.param), tmp_path_factory.mktemp("bad-input"))
    log = factory.open()
    prepare(log)
    yield log
    factory.close_all()


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_raises_a_specific_error_and_leaves_the_store_unchanged(
    prepared: Log, case: Case, tmp_path: Path
) -> None:
    before = dump(prepared)
    with pytest.raises(KernelError) as info:
        case.call(prepared, tmp_path)
    error = info.value
    assert type(error) is case.error, f"{type(error).__name__}: {error}"
    message = str(error)
    assert len(message) >= 20, message
    assert case.hint.lower() in message.lower(), message
    assert dump(prepared) == before
    assert prepared.verify().ok


def test_case_ids_are_unique() -> None:
    ids = [case_id(c) for c in CASES]
    assert len(ids) == len(set(ids))


def test_every_entry_point_is_covered() -> None:
    entries = {c.entry for c in CASES}
    assert entries >= {
        "Log.append",
        "Log.read",
        "Log.get",
        "Log.head",
        "Log.fork",
        "Log.lineage",
        "Log.verify",
        "Log.checkpoint",
        "Log.blob",
        "Log.put_blob",
        "Snapshot.read",
        "Snapshot.head",
        "Policy",
        "Policy.from_dict",
        "Policy.from_toml",
        "turnlog.open",
        "Log",
    }


def test_a_rejected_open_leaves_no_environment_behind(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with pytest.raises(InvalidArgumentError):
        turnlog.open(path, blob_threshold=10)
    with turnlog.open(path) as log:  # the same path opens cleanly in the same process
        log.append("s", um())
        assert log.verify().ok


# -- the reliability document --------------------------------------------------------------
def _escape(text: str) -> str:
    """Make ``text`` safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


BEGIN = "<!-- bad-input table: generated by `python tests/test_bad_input.py --write` -->"
END = "<!-- bad-input table: end -->"


def render_section() -> str:
    """The bad-input section of ``docs/reliability.md``, rendered from `CASES`."""
    lines = [
        BEGIN,
        "## Bad input",
        "",
        "Every public entry point of the kernel validates its input before it touches",
        "the store. A rejected call raises one specific `KernelError` subclass whose",
        "message says what was expected, what was found and what to do, and leaves the",
        "store byte for byte as it was (all LMDB databases and the bytes of `data.mdb`,",
        "or every table of the in-memory store, compared before and after).",
        "",
        "The table below is generated from `CASES` in `tests/test_bad_input.py`",
        "(`python tests/test_bad_input.py --write`); each row is a test",
        f"run against both backends (LMDB and memory). {len(CASES)} rows.",
        "",
        "| bad input tried | entry point | error raised | store unchanged |",
        "|---|---|---|---|",
    ]
    for case in CASES:
        lines.append(f"| {_escape(case.tried)} | `{case.entry}` | `{case.error.__name__}` | yes |")
    lines += [
        "",
        "Related guarantees are tested elsewhere: a failed batch is all-or-nothing",
        "(`tests/test_log_conformance.py`), a damaged store is reported by `verify`",
        "instead of raising (`tests/test_tamper.py`), and a process killed mid-append",
        "loses no acknowledged batch (`tests/test_crash.py`).",
        END,
    ]
    return "\n".join(lines)


def render_document(current: str) -> str:
    """``current`` (the text of docs/reliability.md) with its bad-input section
    replaced by `render_section`."""
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        return head + render_section() + rest.split(END, 1)[1]
    return current.rstrip("\n") + "\n\n" + render_section() + "\n"


def test_reliability_doc_matches_the_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert text == render_document(text), (
        "the bad-input table of docs/reliability.md is out of date; regenerate it with "
        "`python tests/test_bad_input.py --write`"
    )


if __name__ == "__main__":
    import sys

    if "--write" in sys.argv:
        DOC.write_text(render_document(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(render_section())
