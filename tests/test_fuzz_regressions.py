"""Regression tests for what the fuzz campaigns found (docs/reliability.md, "Fuzzing").

Each test states the finding as the contract it broke and checks the fix; the
input that found it is also kept in ``fuzz/corpus/<target>/`` (files named
``crash-*``), which tests/test_fuzz_harnesses.py replays.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import blake3
import msgspec
import pytest
import turnlog
from hypothesis import given, settings
from hypothesis import strategies as st
from support import dump
from turnlog import Policy
from turnlog._chain import check_record
from turnlog._codec import decode_event
from turnlog._pack._prune import _DECISION, DECISION_PHRASES, decides
from turnlog._pack._prune import line_key as _line_key
from turnlog._pack._prune import pathish as _pathish
from turnlog._pack._prune import quote_keys as _quote_keys
from turnlog.adapters.importers import detect, export_session, import_file
from turnlog.adapters.providers import parse_response
from turnlog.errors import DecodeError, ImportFormatError, InvalidEventError
from turnlog.events import (
    AssistantMessageAdded,
    Event,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
    event_from_json,
)
from turnlog.log import GENESIS
from turnlog.stores import WriteTxn
from turnlog.testing import check_packed, memory_log, project

CORPUS = Path(__file__).resolve().parents[1] / "fuzz" / "corpus"
_RAW = msgspec.msgpack.Encoder()  # no key sorting: it can write what a canonical one cannot


def _record_with_meta(meta: object) -> bytes:
    """Canonical-looking event bytes whose meta holds ``meta`` (written raw)."""
    good = msgspec.msgpack.Encoder(order="deterministic").encode(
        Event(session="x", seq=0, body=UserMessageAdded(text="hi"), meta={"m": 1})
    )
    return good.replace(b"\xa1m\x01", b"\xa1m" + _RAW.encode(meta))


# -- codec: decoded meta that would not re-encode (fuzz_codec, crash-meta-int-key) ----------------
BAD_META = {
    "a map with an int key": {1: "x"},
    "a map with a bytes key": {b"k": 1},
    "bytes": b"\x00\x01",
    "an extension type": msgspec.msgpack.Ext(5, b"x"),
    "NaN": float("nan"),
    "maps nested 40 deep": json.loads('{"a":' * 40 + "1" + "}" * 40),
}


@pytest.mark.parametrize("kind", sorted(BAD_META))
def test_decoding_refuses_meta_that_append_would_refuse(kind: str) -> None:
    # Found: check_record (so verify) raised TypeError on a record whose meta held a
    # map with an int key: decode accepted it, canonical re-encoding could not.
    data = _record_with_meta(BAD_META[kind])
    with pytest.raises(DecodeError, match="meta"):
        decode_event(data)
    digest = blake3.blake3(GENESIS + data).digest()
    event, reason = check_record(GENESIS + digest + data, session="x", seq=0, prev=GENESIS)
    assert event is None and reason is not None and "does not decode" in reason


def test_verify_reports_a_stored_record_with_an_int_key_in_meta(log: turnlog.Log) -> None:
    data = _record_with_meta({1: "x"})
    digest = blake3.blake3(GENESIS + data).digest()

    def plant(txn: WriteTxn) -> None:
        txn.put_event("x", 0, GENESIS + digest + data)
        txn.set_head("x", 0, digest)

    log.store.write(plant)
    report = log.verify()
    assert not report.ok and report.problem is not None and report.problem.seq == 0
    with pytest.raises(turnlog.errors.StoreCorruptError):
        log.read("x")


def test_an_export_line_with_meta_nested_too_deep_is_refused() -> None:
    line = {
        "session": "x",
        "seq": 0,
        "body": {"type": "user", "text": "hi"},
        "meta": json.loads('{"a":' * 40 + "1" + "}" * 40),
        "prev": "",
        "hash": "",
    }
    with pytest.raises(DecodeError, match="nested deeper"):
        event_from_json(json.dumps(line))


def test_the_codec_crash_input_decodes_to_an_error() -> None:
    with pytest.raises(DecodeError):
        decode_event((CORPUS / "codec" / "crash-meta-int-key").read_bytes())


# -- pack: two calls with one id in one message (fuzz_pack, seed 0) -------------------------------
def test_a_message_with_two_calls_of_one_id_is_refused(log: turnlog.Log) -> None:
    # Found: the packer answered both calls with a placeholder but counted one, so the
    # prompt's token count was short by a message, and the prompt repeated the id.
    before = dump(log)
    message = AssistantMessageAdded(
        parts=(
            TextPart(text="two at once"),
            ToolCall(id="c3", name="Write", arguments="{}"),
            ToolCall(id="c3", name="Glob", arguments="{}"),
        )
    )
    with pytest.raises(InvalidEventError, match="several tool calls with id 'c3'"):
        log.append("s", message)
    assert dump(log) == before


def test_distinct_ids_in_one_message_pack_with_exact_accounting() -> None:
    log = memory_log()
    log.append(
        "s",
        AssistantMessageAdded(
            parts=(
                TextPart(text="hi"),
                ToolCall(id="c3", name="Write", arguments="{}"),
                ToolCall(id="c4", name="Glob", arguments="{}"),
            )
        ),
    )
    view = project(log, "s")
    packed = turnlog._pack.pack(view, Policy())
    check_packed(view, packed, Policy())
    assert [m.role for m in packed.prompt.messages] == ["assistant", "tool", "tool"]


def test_deeply_nested_tool_arguments_are_stored_and_packed_as_text() -> None:
    log = memory_log()
    arguments = '{"a":' * 3_000 + "1" + "}" * 3_000
    log.append(
        "s",
        [
            UserMessageAdded(text="go"),
            AssistantMessageAdded(parts=(ToolCall(id="c1", name="Glob", arguments=arguments),)),
            ToolResultAdded(call_id="c1", tool_name="Glob", output="ok"),
        ],
    )
    view = project(log, "s")
    packed = turnlog._pack.pack(view, Policy())
    check_packed(view, packed, Policy())
    call = packed.prompt.messages[1].parts[0]
    assert isinstance(call, ToolCall) and call.arguments == arguments


@pytest.mark.parametrize("depth", [400, 900])
def test_clipping_arguments_nested_deeper_than_a_walk_keeps_them_json(depth: int) -> None:
    # fuzz_pack, crash-aaa7c6da: under packing rules 2 an oversized argument nested a
    # few hundred deep (which json.loads takes) overflowed the recursive clip walk.
    log = memory_log()
    arguments = '{"a":' * depth + json.dumps("x" * 40_000) + "}" * depth
    log.append(
        "s",
        [
            UserMessageAdded(text="go"),
            AssistantMessageAdded(parts=(ToolCall(id="c1", name="Write", arguments=arguments),)),
            ToolResultAdded(call_id="c1", tool_name="Write", output="ok"),
        ],
    )
    view = project(log, "s")
    policy = Policy(context_window=8_000, output_reserve=1_000, rules=2)
    packed = turnlog.pack(view, policy)
    check_packed(view, packed, policy)
    [call] = [p for m in packed.prompt.messages for p in m.parts if isinstance(p, ToolCall)]
    clipped = json.loads(call.arguments)
    assert isinstance(clipped, dict) and list(clipped) == ["_clipped_arguments"]


# -- importers: two records with one source id (fuzz_importers, crash-openhands-duplicate-ids) ----
def test_a_transcript_with_two_records_of_one_id_is_refused_whole(tmp_path: Path) -> None:
    # Found: the second record's idempotency key repeated the first's, and Log.append
    # raised InvalidEventError from the middle of the import instead of the importer
    # refusing the file with ImportFormatError before writing.
    data = (CORPUS / "importers" / "crash-openhands-duplicate-ids").read_bytes()[1:]
    path = tmp_path / "events.json"
    path.write_bytes(data)
    log = memory_log()
    before = dump(log)
    with pytest.raises(ImportFormatError, match=r"events\[1\]: .*key 'oh:0'.*events\[0\]"):
        import_file(log, path)
    assert dump(log) == before
    summary = import_file(log, path, skip_bad=True)
    assert [s.where for s in summary.skipped] == ["events[1]"]
    assert log.verify().ok


def test_duplicate_ids_in_a_later_batch_do_not_leave_the_earlier_batches(tmp_path: Path) -> None:
    # Claude Code records with one uuid, far apart: refused before the first batch.
    def rec(uuid: str, parent: str | None, text: str, ts: int) -> dict[str, object]:
        return {
            "type": "user",
            "uuid": uuid,
            "parentUuid": parent,
            "sessionId": "dup",
            "timestamp": f"2025-01-01T00:00:{ts:02d}Z",
            "message": {"role": "user", "content": text},
        }

    lines = [rec("u1", None, "one", 1), rec("u2", "u1", "two", 2), rec("u1", "u2", "again", 3)]
    path = tmp_path / "dup.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    log = memory_log()
    before = dump(log)
    with pytest.raises(ImportFormatError):
        import_file(log, path, format="claude_code")
    assert dump(log) == before


# -- view: quadratic path matching (fuzz_pack, crash-slow-path-regex) ---------------------------
_PATH_REGEX = re.compile(r"[\w./\\-]*\w\.\w{1,8}\b")
_PHRASES = [
    *DECISION_PHRASES,
    *(p.upper() for p in DECISION_PHRASES),
    *(p.title() for p in DECISION_PHRASES),
]
_DECISION_REGEX = re.compile(
    r"\b(" + "|".join(map(re.escape, DECISION_PHRASES)) + r")\b", re.IGNORECASE
)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab1_.../-\\ é\n:Ж")), max_size=60))
def test_path_matching_finds_what_the_regex_finds(text: str) -> None:
    assert _pathish(text) == _PATH_REGEX.findall(text)


def test_long_runs_of_path_characters_pack_in_linear_time() -> None:
    # Found: a 9,000-character line of dashes in assistant text took 0.1 s per
    # projection step; 200 KB (a base64 file written through a tool call) took hours.
    log = memory_log()
    blob = "QUJD" * 50_000
    log.append(
        "s",
        [
            UserMessageAdded(text="write it"),
            AssistantMessageAdded(
                parts=(
                    TextPart(text="-" * 200_000 + "\n" + "." * 200_000 + " see src/app.py"),
                    ToolCall(id="c1", name="Write", arguments=json.dumps({"content": blob})),
                )
            ),
            ToolResultAdded(call_id="c1", tool_name="Write", output="written"),
        ],
    )
    view = project(log, "s")
    assert _pathish("see src/app.py") == ["src/app.py"]
    check_packed(view, turnlog._pack.pack(view, Policy()), Policy())


def test_an_openhands_output_with_a_flat_system_action_imports_and_exports(tmp_path: Path) -> None:
    # Found: a "system" action without "args" (the flat form of output.jsonl) raised
    # KeyError from the importer instead of being imported like its other flat actions.
    line = {
        "instruction": "x",
        "history": [
            {"action": "system", "content": "You are a helpful agent."},
            {"action": "message", "content": "fix the bug"},
            {"action": "run", "command": "ls"},
            {"observation": "run", "content": "a.py"},
        ],
    }
    path = tmp_path / "output.jsonl"
    path.write_text(json.dumps(line) + "\n")
    log = memory_log()
    summary = import_file(log, path, format="openhands_output")
    bodies = [e.body for e in log.read(summary.roots[0])]
    assert any(getattr(b, "text", "") == "You are a helpful agent." for b in bodies)
    exported = export_session(log, summary.roots[0], "openhands_output")
    assert json.loads(exported)["history"][0]["content"] == "You are a helpful agent."
    assert "args" not in json.loads(exported)["history"][0]


# -- responses: a reply with two calls of one id (fuzz_responses, crash-duplicate-call-ids) -------
def test_a_reply_with_two_tool_calls_of_one_id_is_a_decode_error() -> None:
    # Found: parse_response returned such a reply, which Log.append then refused;
    # a parsed reply must be appendable as it is, so the parser refuses it instead.
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [
            {"type": "tool_use", "id": "toolu_02", "name": "a", "input": {}},
            {"type": "tool_use", "id": "toolu_02", "name": "b", "input": {}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    with pytest.raises(DecodeError, match="several tool calls with id 'toolu_02'"):
        parse_response("anthropic", json.dumps(body))


# -- importers: two dead branches named alike (fuzz_importers, crash-claude-branch-names) --------
def test_dead_branches_whose_ids_share_a_prefix_get_sessions_of_their_own(tmp_path: Path) -> None:
    # Dead branches are named after the first 8 characters of their root's uuid; two
    # roots alike there made the import fork twice into one session (InvalidEventError).
    def record(uuid: str, parent: str | None, kind: str, text: str, ts: int) -> dict[str, object]:
        message: dict[str, object] = (
            {"role": "user", "content": text}
            if kind == "user"
            else {
                "id": f"msg_{uuid}",
                "type": "message",
                "role": "assistant",
                "model": "claude-x",
                "content": [{"type": "text", "text": text}],
                "stop_reason": None,
                "usage": {"input_tokens": 3, "output_tokens": 5},
            }
        )
        return {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": "/w",
            "sessionId": "s-1",
            "version": "2.1.5",
            "type": kind,
            "uuid": uuid,
            "timestamp": f"2026-01-01T00:00:{ts:02d}.000Z",
            "message": message,
        }

    records = [
        record("u1", None, "user", "first question", 1),
        record("a1", "u1", "assistant", "first answer", 2),
        record("bbbbbbbb-1", "a1", "user", "an abandoned question", 3),
        record("bbbbbbbb-2", "a1", "user", "another abandoned question", 4),
        record("u3", "a1", "user", "the question kept", 5),
        record("a3", "u3", "assistant", "the answer kept", 6),
    ]
    path = tmp_path / "s-1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    log = turnlog.open(":memory:")
    summary = import_file(log, path)
    assert len(summary.sessions) == len(set(summary.sessions)) == 3
    branches = sorted(summary.sessions[1:])
    assert branches[1] == branches[0] + "-2"
    said = {
        name: [e.body.text for e in log.lineage(name) if isinstance(e.body, UserMessageAdded)]
        for name in summary.sessions
    }
    assert sorted(said.values()) == [
        ["first question", "an abandoned question"],
        ["first question", "another abandoned question"],
        ["first question", "the question kept"],
    ]
    assert log.verify().ok
    assert import_file(log, path).appended == 0  # the same names again: nothing new


# -- importers: a record whose "type" is not a string (fuzz_importers, crash-type-is-a-map) ------
@pytest.mark.parametrize("kind", ['{"type": "message"}', "[1]", "3", "null", "true"])
def test_format_detection_takes_any_json_as_a_record_type(kind: str, tmp_path: Path) -> None:
    # Detection looked the record's "type" up in a set: a JSON object there raised
    # TypeError (unhashable) instead of "format not recognised".
    line = f'{{"timestamp": "2025-09-29T07:37:08.461Z", "type": {kind}, "payload": {{}}}}\n'
    with pytest.raises(ImportFormatError, match="format"):
        detect(line.encode(), name="session.jsonl")
    path = tmp_path / "session.jsonl"
    path.write_text(line)
    log = turnlog.open(":memory:")
    with pytest.raises(ImportFormatError):
        import_file(log, path)
    assert log.sessions() == []
    with pytest.raises(ImportFormatError, match="format"):  # a JSON list of items
        detect(f'[{{"type": {kind}}}, {{"type": "other"}}]'.encode(), name="items.json")


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_PHRASES),
            st.text(
                alphabet=st.sampled_from(list("abeiost'_ .\nBTI\u017f\u0131\u0130\u212a\u0301")),
                max_size=12,
            ),
        ),
        max_size=8,
    )
)
def test_decision_language_is_found_as_the_phrase_alternation_finds_it(parts: list[str]) -> None:
    text = "".join(parts)
    assert bool(_DECISION.search(text)) == bool(_DECISION_REGEX.search(text))
    assert decides(text) == bool(_DECISION_REGEX.search(text))


def _quote_keys_of_every_line(text: str) -> tuple[int, ...]:
    lines = [line.strip() for line in text.splitlines()]
    return tuple(_line_key(line) for line in lines if len(line) >= 24)[:3]


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "a" * 30,
                "b" * 5,
                "\r",
                "\n",
                "\r\n",
                " " * 4_000,
                "c" * 4_090,
                "\x85",
                "d" * 25,
                "\u2028",
            ]
        ),
        max_size=12,
    )
)
def test_quoted_lines_of_a_long_output_are_its_first_lines(parts: list[str]) -> None:
    text = "".join(parts)
    assert _quote_keys(text) == _quote_keys_of_every_line(text)


def test_a_tiny_window_with_rules_unset_packs_with_numbers_in_range() -> None:
    """fuzz_policy: ``context_window = 10`` loads (rules unset packs as the default rules,
    whose reserve and buffers scale to the window) and the numbers it packs with are in
    range; read with the stored fields, ``usable`` was -15,990."""
    policy = Policy.from_toml(b"context_window = 10").resolved()
    assert 0 < policy.usable <= policy.context_window == 10
    for which in ("warning", "compact", "blocking"):
        assert 0 <= policy.level(which) <= policy.usable  # type: ignore[arg-type]
