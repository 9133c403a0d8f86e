"""docs/events.md specifies the canonical bytes and the hash chain completely.

The test vectors in the document must match the library, and a MessagePack
encoder written here from the document alone (its rules, and the field order
of its tables) must reproduce the canonical bytes and hashes of the vectors
and of every event of a long session covering every payload kind.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from pathlib import Path
from typing import Any

import blake3
import msgspec
import pytest
import turnlog
from turnlog import Draft, Policy
from turnlog._codec import encode_canonical
from turnlog.events import (
    AssistantMessageAdded,
    BlobRef,
    Body,
    CompactionCommitted,
    CompactionFailed,
    CompactionPartSummarized,
    EventsPinned,
    ImagePart,
    MemoryChanged,
    NativePart,
    NotificationAdded,
    PolicySet,
    ProviderErrorReceived,
    ReasoningPart,
    RecallAdded,
    RecallHit,
    RequestIssued,
    ResponseReceived,
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
    event_to_json,
)
from turnlog.tools import demo, eventdoc

DOC = Path(__file__).resolve().parents[1] / "docs" / "events.md"
GENESIS = bytes(32)


# -- a MessagePack encoder written from the document ---------------------------------------


class StructMap:
    """A struct's map: entries in order, header width from the declared entry count."""

    def __init__(self, entries: list[tuple[str, Any]], declared: int) -> None:
        self.entries = entries
        self.declared = declared


def pack(value: Any) -> bytes:
    """MessagePack per the document: smallest forms, float64 only, sorted plain maps."""
    if value is None:
        return b"\xc0"
    if value is True:
        return b"\xc3"
    if value is False:
        return b"\xc2"
    if isinstance(value, int):
        if 0 <= value < 128:
            return bytes([value])
        if value >= 0:
            for tag, fmt, limit in (
                (0xCC, ">B", 2**8),
                (0xCD, ">H", 2**16),
                (0xCE, ">I", 2**32),
                (0xCF, ">Q", 2**64),
            ):
                if value < limit:
                    return bytes([tag]) + struct.pack(fmt, value)
        if value >= -32:
            return struct.pack(">b", value)
        for tag, fmt, limit in (
            (0xD0, ">b", 2**7),
            (0xD1, ">h", 2**15),
            (0xD2, ">i", 2**31),
            (0xD3, ">q", 2**63),
        ):
            if value >= -limit:
                return bytes([tag]) + struct.pack(fmt, value)
        raise OverflowError(value)
    if isinstance(value, float):
        return b"\xcb" + struct.pack(">d", value)
    if isinstance(value, str):
        data = value.encode("utf-8")
        return _header(len(data), 0xA0, 32, (0xD9, ">B"), (0xDA, ">H"), (0xDB, ">I")) + data
    if isinstance(value, bytes):
        return _header(len(value), None, 0, (0xC4, ">B"), (0xC5, ">H"), (0xC6, ">I")) + value
    if isinstance(value, list):
        return _header(len(value), 0x90, 16, None, (0xDC, ">H"), (0xDD, ">I")) + b"".join(
            pack(v) for v in value
        )
    if isinstance(value, StructMap):
        n = len(value.entries)
        head = bytes([0x80 | n]) if value.declared < 16 else b"\xde" + struct.pack(">H", n)
        return head + b"".join(pack(k) + pack(v) for k, v in value.entries)
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: k.encode("utf-8"))
        return _header(len(keys), 0x80, 16, None, (0xDE, ">H"), (0xDF, ">I")) + b"".join(
            pack(k) + pack(value[k]) for k in keys
        )
    raise TypeError(type(value))


def _header(n: int, fix: int | None, fix_limit: int, *forms: tuple[int, str] | None) -> bytes:
    if fix is not None and n < fix_limit:
        return bytes([fix | n])
    for form, limit in zip(forms, (2**8, 2**16, 2**32), strict=True):
        if form is not None and n < limit:
            return bytes([form[0]]) + struct.pack(form[1], n)
    raise OverflowError(n)


# -- the document's field tables -----------------------------------------------------------


class Table:
    """One struct as the document describes it."""

    def __init__(self, name: str, tag: str | None) -> None:
        self.name = name
        self.tag = tag
        self.fields: list[tuple[str, str]] = []  # (name, type text)

    @property
    def declared(self) -> int:
        return len(self.fields) + (1 if self.tag else 0)


def parse_tables(text: str) -> dict[str, Table]:
    """Struct name -> table, from the generated part of the document."""
    tables: dict[str, Table] = {}
    current: Table | None = None
    region = text[text.index(eventdoc.BEGIN) : text.index(eventdoc.END)]
    for line in region.splitlines():
        heading = re.fullmatch(r"### (?:`(\w+)`: )?(\w+)", line)
        if heading:
            current = tables[heading.group(2)] = Table(heading.group(2), heading.group(1))
            continue
        row = re.match(r"\| \d+ \| `(\w+)` \| (.*?) \| ", line)
        if row and current is not None:
            current.fields.append((row.group(1), row.group(2)))
    return tables


TABLES = parse_tables(DOC.read_text(encoding="utf-8"))
BY_TAG = {t.tag: t for t in TABLES.values() if t.tag}


def canonical_from_json(event: dict[str, Any]) -> bytes:
    """The canonical bytes of an exported event, rebuilt from the document alone."""
    bare = {k: v for k, v in event.items() if k not in ("prev", "hash")}
    return pack(_struct(bare, TABLES["Event"]))


def _struct(raw: dict[str, Any], table: Table) -> StructMap:
    known = {name for name, _ in table.fields} | ({"type"} if table.tag else set())
    assert set(raw) <= known, f"{table.name}: fields {set(raw) - known} are not documented"
    entries: list[tuple[str, Any]] = []
    if table.tag:
        assert raw["type"] == table.tag
        entries.append(("type", table.tag))
    for name, type_text in table.fields:
        if name in raw:
            entries.append((name, _value(raw[name], type_text)))
    return StructMap(entries, table.declared)


def _value(raw: Any, type_text: str) -> Any:
    if isinstance(raw, dict):
        if "type" in raw and raw["type"] in BY_TAG:
            return _struct(raw, BY_TAG[raw["type"]])
        for name in re.findall(r"\w+", type_text):
            if name in TABLES and name != "Event":
                return _struct(raw, TABLES[name])
        return raw  # a plain map: keys sorted by pack()
    if isinstance(raw, list):
        return [_value(item, type_text.removeprefix("array of ")) for item in raw]
    if isinstance(raw, str) and "bytes" in type_text:
        return base64.b64decode(raw)
    return raw


# -- the vectors ---------------------------------------------------------------------------


def doc_vectors() -> list[tuple[bytes, bytes, bytes]]:
    """``(canonical, prev, hash)`` of each test vector in the document."""
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"canonical bytes \((\d+) bytes, hex\):\n\n```\n([0-9a-f\n]+)```", text)
    chains = re.findall(r"prev  ([0-9a-f]{64})\nhash  ([0-9a-f]{64})", text)
    assert len(blocks) == len(chains) == 2
    out = []
    for (size, hexed), (prev, digest) in zip(blocks, chains, strict=True):
        data = bytes.fromhex(hexed.replace("\n", ""))
        assert len(data) == int(size)
        out.append((data, bytes.fromhex(prev), bytes.fromhex(digest)))
    return out


VECTOR_DRAFTS = [
    Draft(body=UserMessageAdded(text="hello"), time=1700000000000000, meta={"b": 1, "a": "x"}),
    Draft(
        body=AssistantMessageAdded(
            parts=(
                TextPart(text="Reading it."),
                ToolCall(id="call_1", name="Read", arguments='{"path":"a.py"}'),
            ),
            model="m1",
        ),
        time=1700000001500000,
        key="k-1",
        causation="demo-0",
        meta={"z": None, "é": -3, "Z": 1.5},
    ),
]

# The vectors as a third party would hold them: plain JSON-like values, keys in no
# particular order.
VECTOR_JSON: list[dict[str, Any]] = [
    {
        "meta": {"b": 1, "a": "x"},
        "time": 1700000000000000,
        "seq": 0,
        "session": "demo",
        "body": {"text": "hello", "type": "user"},
    },
    {
        "session": "demo",
        "seq": 1,
        "key": "k-1",
        "causation": "demo-0",
        "time": 1700000001500000,
        "meta": {"é": -3, "z": None, "Z": 1.5},
        "body": {
            "model": "m1",
            "type": "assistant",
            "parts": [
                {"type": "text", "text": "Reading it."},
                {
                    "arguments": '{"path":"a.py"}',
                    "name": "Read",
                    "id": "call_1",
                    "type": "tool_call",
                },
            ],
        },
    },
]


def test_doc_vectors_match_the_library() -> None:
    log = turnlog.open(":memory:")
    for draft in VECTOR_DRAFTS:
        log.append("demo", draft)
    events = log.read("demo")
    for event, (canonical, prev, digest) in zip(events, doc_vectors(), strict=True):
        assert encode_canonical(msgspec.structs.replace(event, prev=b"", hash=b"")) == canonical
        assert event.prev == prev
        assert event.hash == digest


def test_independent_encoder_reproduces_the_doc_vectors() -> None:
    prev = GENESIS
    for raw, (canonical, doc_prev, digest) in zip(VECTOR_JSON, doc_vectors(), strict=True):
        assert canonical_from_json(raw) == canonical
        assert doc_prev == prev
        assert blake3.blake3(prev + canonical).digest() == digest
        prev = digest


def _every_kind(log: turnlog.Log) -> None:
    """A session holding every payload kind and nested struct, defaults and non-defaults."""
    image = log.put_blob(b"\x89PNG fake", "image/png")
    hexa = "ab" * 32
    drafts: list[Body] = [
        SystemSectionSet(name="base", text="Be brief.", position=-40000),
        ToolsSet(
            tools=(
                ToolSpec(name="Read", description="read", parameters='{"type":"object"}'),
                ToolSpec(name="Noop"),
            )
        ),
        PolicySet(policy=Policy(context_window=64_000, output_reserve=8_000, compact_ratio=0.8)),
        UserMessageAdded(
            text="look at this " + "x" * 70_000,
            images=(
                ImagePart(media_type="image/png", blob=image),
                ImagePart(media_type="image/jpeg", url="https://e.x/a.jpg"),
            ),
            name="ana",
        ),
        AssistantMessageAdded(
            parts=(
                ReasoningPart(text="hm", opaque="enc", provider="p", id="rs_1"),
                ToolCall(id="c1", name="Read"),
                ToolCall(id="c2", name="Read", arguments="{}"),
            ),
            response_id="r1",
        ),
        ToolResultAdded(
            call_id="c1", tool_name="Read", output="ok", is_error=True, exit_code=-(2**40)
        ),
        ToolResultAdded(
            call_id="c2",
            tool_name="Read",
            output="y" * 300,
            exit_code=200,
            blob=BlobRef(hash=hexa, size=1, media_type="text/plain; charset=utf-8"),
        ),
        NotificationAdded(source="ci", text="done"),
        MemoryChanged(
            op="save",
            memory_id="m1",
            memory_type="decision",
            retention="working",
            title="t",
            content="c",
            expires_seq=2**40,
            expires_time=-1,
            source_seqs=(0, 1, 2),
            source_session="other",
            reason="r",
        ),
        RecallAdded(
            query="q",
            hits=(
                RecallHit(session="s", seq=3, text="t", score="0.5"),
                RecallHit(session="s", seq=4, text="u", score="0.25", offset=70_000),
            ),
            searcher="bm25",
        ),
        CompactionCommitted(
            first_seq=0,
            last_seq=3,
            covered_digest=hexa,
            summary="s",
            level=1,
            children=(1, 2),
            summarizer="x",
            model="m",
            prompt_hash=hexa,
            reason="manual",
            tokens_before=70_000,
            tokens_after=65_536,
            costs="freed=1",
        ),
        CompactionCommitted(
            first_seq=0, last_seq=1, covered_digest=hexa, summary="s", reason="threshold"
        ),
        CompactionPartSummarized(
            first_seq=0,
            last_seq=3,
            summary="p",
            part=2,
            parts=3,
            first_offset=65_536,
            last_offset=2**33,
            level=1,
            children=(1, 2),
            summarizer="x",
            model="m",
            prompt_hash=hexa,
            tokens_before=70_000,
            tokens_after=12,
        ),
        CompactionCommitted(
            first_seq=0,
            last_seq=3,
            covered_digest=hexa,
            summary="s",
            parts=(15, 16),
            tokens_before=300_000,
        ),
        CompactionFailed(error="e", reason="overflow", summarizer="x", first_seq=0, last_seq=1),
        RequestIssued(
            head_seq=12,
            head_hash=hexa,
            policy_hash=hexa,
            tokenizer="cl100k_base",
            prompt_hash=hexa,
            tokens=123_456,
            format="neutral",
            model="m",
            calibration="1.1",
            recovery=True,
            stages="a,b",
            digests=bytes(range(40)),
            rendered_hash=hexa,
        ),
        ResponseReceived(
            request_seq=13,
            usage=Usage(
                input_tokens=5,
                output_tokens=2**33,
                cache_read_tokens=1,
                cache_write_tokens=2,
                reasoning_tokens=3,
            ),
            stop_reason="end_turn",
            model="m",
            response_id="r",
        ),
        ResponseReceived(usage=Usage()),
        ProviderErrorReceived(
            request_seq=13,
            status=413,
            code="too_long",
            error_type="invalid_request",
            message="too long",
            overflow=True,
        ),
        AssistantMessageAdded(
            parts=(
                NativePart(
                    format="anthropic",
                    item_type="compaction",
                    data='{"type":"compaction","content":"so far: é"}',
                    text="so far: é",
                ),
                NativePart(
                    format="openai-responses",
                    item_type="compaction",
                    data='{"type":"compaction","id":"cmp_1","encrypted_content":"gAAA"}',
                ),
                TextPart(text="go on"),
            )
        ),
        EventsPinned(seqs=(0, 3), pinned=False),
        StateSaved(
            source="langgraph.checkpoint",
            data='{"id": "1"}',
            blobs=(BlobRef(hash=hexa, size=3, media_type="application/vnd.langgraph.msgpack"),),
        ),
        SessionRewound(to_seq=-1, reason="undo"),
    ]
    log.append(
        "kinds",
        [
            Draft(
                body=body,
                time=i * 1_000_003 - 5,
                key=f"k{i}",
                meta={"i": i, "nested": {"é": [1.25, None, True], "a": {}}},
            )
            for i, body in enumerate(drafts)
        ],
    )
    log.fork("kinds", 3, "kinds-fork", time=7)
    log.append("kinds-fork", UserMessageAdded(text="after the fork"))


def _check_export(log: turnlog.Log, session: str) -> int:
    events = log.read(session)
    first = events[0]
    prev = first.prev if first.kind == "fork" else GENESIS
    for event in events:
        line = json.loads(event_to_json(event))
        canonical = canonical_from_json(line)
        assert canonical == encode_canonical(msgspec.structs.replace(event, prev=b"", hash=b""))
        assert bytes.fromhex(line["prev"]) == prev, f"{session}#{event.seq} breaks the chain"
        digest = blake3.blake3(prev + canonical).digest()
        assert bytes.fromhex(line["hash"]) == digest, f"{session}#{event.seq} hash"
        prev = digest
    head = log.head(session)
    assert head is not None and head.hash == prev
    return len(events)


def test_independent_encoder_verifies_an_export_of_every_kind() -> None:
    log = turnlog.open(":memory:")
    _every_kind(log)
    kinds = {event.kind for event in log.read("kinds")}
    # erasure and erased are written only by an erasure: the test below.
    assert kinds | {"user", "fork"} >= set(BY_TAG) - {
        "text",
        "reasoning",
        "tool_call",
        "image",
        "native",
        "erasure",
        "erased",
    }
    assert _check_export(log, "kinds") == 23
    assert _check_export(log, "kinds-fork") == 2


def test_independent_verifier_accepts_an_erased_export_and_nothing_else() -> None:
    # The rule of docs/events.md ("Erased events"), applied to an export: a stub keeps
    # its stored hash, which its erasure event must list at its seq.
    log = turnlog.open(":memory:")
    _every_kind(log)
    erased = log.erase("kinds", [0, 2], reason="test vector")
    lines = [json.loads(event_to_json(event)) for event in log.read("kinds")]
    erasure = lines[erased.seq]  # type: ignore[index]
    assert erasure["body"]["type"] == "erasure"
    listed = dict(zip(erasure["body"]["seqs"], erasure["body"]["hashes"], strict=True))

    def verify(lines: list[dict[str, Any]]) -> bool:
        prev = GENESIS
        for seq, line in enumerate(lines):
            canonical = canonical_from_json(line)
            if bytes.fromhex(line["prev"]) != prev:
                return False
            if line["body"]["type"] == "erased":
                if line["body"]["by"] <= seq or listed.get(seq) != line["hash"]:
                    return False
            elif blake3.blake3(prev + canonical).digest() != bytes.fromhex(line["hash"]):
                return False
            prev = bytes.fromhex(line["hash"])
        return True

    assert verify(lines)
    forged = json.loads(json.dumps(lines))
    forged[1]["body"] = {"type": "erased", "kind": "assistant", "by": erased.seq}
    assert not verify(forged)  # a stub the erasure does not list


def test_independent_encoder_verifies_the_demo_session() -> None:
    log = turnlog.open(":memory:")
    demo.run_demo(log, turns=30)
    assert _check_export(log, demo.DEFAULT_SESSION) > 200


def test_event_reference_tables_are_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert eventdoc.replace_tables(text) == text, (
        "docs/events.md is out of date: run python -m turnlog.tools.eventdoc --write docs/events.md"
    )


def test_every_field_has_a_meaning() -> None:
    missing = [
        f"{t.name}.{name}"
        for t in TABLES.values()
        if t.name != "Policy"
        for name, _ in t.fields
        if f"{t.name}.{name}" not in eventdoc.MEANINGS
    ]
    assert not missing


def test_only_policy_declares_sixteen_entries_or_more() -> None:
    # The header rule of docs/events.md ("Maps"): crossing 16 declared entries would
    # change how stored events re-encode.
    big = sorted(t.name for t in TABLES.values() if t.declared >= 16)
    assert big == ["Policy"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            CompactionCommitted(
                first_seq=0,
                last_seq=0,
                covered_digest="0" * 64,
                summary="s",
                reason="".join(["thres", "hold"]),  # type: ignore[arg-type]
            ),  # type: ignore[arg-type]
            "reason",
        ),
        (ToolResultAdded(call_id="c", tool_name="t", output="o", is_error=bool(0)), "is_error"),
        (SystemSectionSet(name="n", text="t", position=int("0")), "position"),
        (ResponseReceived(usage=Usage()), "usage"),
        (ResponseReceived(), "usage"),
        (
            AssistantMessageAdded(
                parts=(ToolCall(id="a", name="b", arguments="".join(["{", "}"])),)
            ),
            "parts",
        ),
    ],
)
def test_a_field_equal_to_its_default_is_omitted(body: Any, field: str) -> None:
    log = turnlog.open(":memory:")
    log.append("s", [UserMessageAdded(text="first"), body])
    event = log.read("s")[1]
    raw = msgspec.msgpack.decode(
        encode_canonical(msgspec.structs.replace(event, prev=b"", hash=b""))
    )
    if field == "parts":
        assert "arguments" not in raw["body"]["parts"][0]
    else:
        assert field not in raw["body"]


def test_equal_events_built_differently_hash_the_same() -> None:
    log = turnlog.open(":memory:")
    first = log.append(
        "a",
        AssistantMessageAdded(parts=(ToolCall(id="c", name="d", arguments="".join(["{", "}"])),)),
    )
    second = log.append("b", AssistantMessageAdded(parts=(ToolCall(id="c", name="d"),)))
    one, two = log.read("a")[0], log.read("b")[0]
    assert encode_canonical(
        msgspec.structs.replace(one, session="x", prev=b"", hash=b"")
    ) == encode_canonical(msgspec.structs.replace(two, session="x", prev=b"", hash=b""))
    assert first.head_hash != second.head_hash  # different sessions, same content bytes


def test_verify_rejects_an_event_that_spells_out_a_default() -> None:
    from turnlog._chain import check_record, link, pack_record
    from turnlog.events import Event

    event = Event(
        session="s",
        seq=0,
        body=AssistantMessageAdded(
            parts=(ToolCall(id="c", name="d", arguments="".join(["{", "}"])),)
        ),
    )
    spelled = msgspec.msgpack.Encoder(order="deterministic").encode(event)
    assert b"arguments" in spelled
    record = pack_record(bytes(32), link(bytes(32), spelled), spelled)
    _, reason = check_record(record, session="s", seq=0, prev=bytes(32))
    assert reason is not None and "canonical" in reason


def test_policy_hash_ignores_how_default_values_were_built() -> None:
    from turnlog import Policy

    built = Policy(
        context_window=int("128000"),
        truncate_head_ratio=float("0.6"),
        tokenizer="".join(["cl100k", "_base"]),
    )
    assert built.hash == Policy().hash
    assert b"context_window" not in Policy().encode()
