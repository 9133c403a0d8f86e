"""A provider's own compaction (a Responses ``compaction`` item, an Anthropic ``compaction``
block) is kept byte for byte as a `NativePart`, renders back unchanged to the format that
produced it and nowhere else, and replaces the conversation before it in prompts while
the log keeps every event."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import turnlog
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from turnlog import Log, Packer, Policy, Replayer, pack
from turnlog.adapters.importers import export_session, import_file
from turnlog.adapters.providers import RenderError, endpoint, render
from turnlog.adapters.providers.fakeserver import FakeReply, FakeServer
from turnlog.adapters.session import Session
from turnlog.errors import BudgetExceededError
from turnlog.events import AssistantMessageAdded, NativePart, SessionRewound
from turnlog.packing import Packed, Projection, get_counter
from turnlog.testing import (
    SessionItem,
    build,
    check_all,
    check_overflow,
    memory_log,
    policies,
    project,
    sessions,
)
from turnlog.tools.cli import main

#: An opaque payload with every character class a base64 or JSON escape could disturb.
OPAQUE = 'gAAAAB+/=\\u00e9"quoted" é 💡 \n end'
RESPONSES_ITEM = {
    "type": "compaction",
    "id": "cmp_9",
    "encrypted_content": OPAQUE,
    "created_by": "server",
}
ANTHROPIC_BLOCK = {"type": "compaction", "content": "Summary: the user said hello. é"}


@pytest.fixture
def log() -> Iterator[Log]:
    with turnlog.open(":memory:") as opened:
        yield opened


def post(server: FakeServer, fmt: str, body: bytes) -> tuple[int, bytes]:
    """POST a rendered body to the fake server: (status, raw reply bytes)."""
    request = urllib.request.Request(
        endpoint(fmt, server.base_url(fmt)), data=body, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def converse(
    log: Log, fmt: str, *, stream: bool = False
) -> tuple[Session, FakeServer, list[bytes]]:
    """Three turns through a session; the second reply carries a provider compaction."""
    replies = [
        FakeReply(text="first"),
        FakeReply(text="after it", compaction="Summary so far"),
        FakeReply(text="third"),
    ]
    raw: list[bytes] = []
    with FakeServer(replies) as server:
        session = Session(log, "s", model="m", format=fmt, max_tokens=200, stream=stream)
        for word in ("hello", "more", "again"):
            session.user(word)
            request = session.prepare()
            status, data = post(server, fmt, request.body)
            assert status == 200, data
            raw.append(data)
            session.record(data, stream=stream)
    return session, server, raw


def native_parts(log: Log) -> list[NativePart]:
    return [
        p
        for e in log.read("s")
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, NativePart)
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("fmt", ["openai-responses", "anthropic"])
def test_a_provider_compaction_is_kept_and_sent_back_unchanged(
    log: Log, fmt: str, stream: bool
) -> None:
    session, server, raw = converse(log, fmt, stream=stream)
    [part] = native_parts(log)
    assert (part.format, part.item_type) == (fmt, "compaction")
    item = json.loads(part.data)
    # The item as the provider sent it, its JSON text byte for byte (keys in its order).
    if fmt == "anthropic" and stream:
        assert part.data == '{"type":"compaction","content":"Summary so far"}'
    else:
        assert part.data.encode() in raw[1]
    last = server.requests[-1].json()
    if fmt == "openai-responses":
        assert item["encrypted_content"].startswith("gAAAA")
        sent = last["input"]
        assert isinstance(sent, list) and sent[0] == item
    else:
        assert part.text == "Summary so far"
        sent = last["messages"]
        assert isinstance(sent, list) and sent[1]["content"][0] == item
    for seq in session.requests():
        assert session.replay(seq).ok


@pytest.mark.parametrize("fmt", ["openai-responses", "anthropic"])
def test_what_a_compaction_replaced_is_not_sent_again_and_stays_in_the_log(
    log: Log, fmt: str
) -> None:
    session, server, _ = converse(log, fmt)
    before, after = server.requests[1].body, server.requests[2].body
    assert b"hello" in before and b"first" in before
    assert b"hello" not in after and b"first" not in after and b"more" not in after
    assert b"after it" in after and b"again" in after
    kinds = [e.kind for e in log.read("s")]
    assert kinds.count("user") == 3 and kinds.count("assistant") == 3  # nothing destroyed
    assert log.verify("s").ok
    packed = session.explain()
    by_pos = {d.pos: d for d in packed.decisions}
    cut = next(
        e.seq
        for e in log.read("s")
        if isinstance(e.body, AssistantMessageAdded)
        and any(isinstance(p, NativePart) for p in e.body.parts)
    )
    for event in log.read("s"):
        if event.seq < cut and event.kind in ("user", "assistant"):
            decision = by_pos[event.seq]
            assert (decision.decision, decision.rule) == ("dropped", "native.compaction")
            assert f"the {fmt} 'compaction' item at position {cut}" in decision.detail
    assert by_pos[cut].decision == "verbatim"


def test_a_rewind_to_before_the_compaction_brings_the_history_back(log: Log) -> None:
    session, _, _ = converse(log, "openai-responses")
    cut = next(
        e.seq
        for e in log.read("s")
        if isinstance(e.body, AssistantMessageAdded)
        and any(isinstance(p, NativePart) for p in e.body.parts)
    )
    log.append("s", SessionRewound(to_seq=cut - 1, reason="undo"))
    session.user("back again")
    body = session.prepare().body
    assert b"hello" in body and b"compaction" not in body
    assert all(session.replay(seq).ok for seq in session.requests())


@pytest.mark.parametrize(
    ("owner", "others"),
    [
        ("openai-responses", ["openai-chat", "anthropic"]),
        ("anthropic", ["openai-chat", "openai-responses"]),
    ],
)
def test_another_format_refuses_the_item_naming_its_type(
    log: Log, owner: str, others: list[str]
) -> None:
    converse(log, owner)
    prompt = Packer(log).pack("s").prompt
    render(prompt, owner, model="m", max_tokens=100)  # its own format takes it
    for other in others:
        with pytest.raises(RenderError, match=f"{owner} 'compaction' item") as caught:
            render(prompt, other, model="m", max_tokens=100)
        assert f"not {other}" in str(caught.value)


def test_a_session_may_not_send_it_to_another_provider(log: Log) -> None:
    converse(log, "anthropic")
    other = Session(log, "s", model="m", format="openai-responses", max_tokens=100)
    other.user("switching providers")
    head = log.head("s")
    with pytest.raises(RenderError, match="anthropic 'compaction' item"):
        other.prepare()
    assert log.head("s") == head  # the refused request was not recorded


@pytest.mark.parametrize(
    ("fmt", "body", "refusal"),
    [
        (
            "openai-responses",
            {"model": "m", "input": [ANTHROPIC_BLOCK]},
            "Unknown parameter: 'input[0].content'.",
        ),
        (
            "openai-responses",
            {"model": "m", "input": [{"type": "compaction", "id": "cmp_1"}]},
            "Missing required parameter: 'input[0].encrypted_content'.",
        ),
        (
            "anthropic",
            {
                "model": "m",
                "max_tokens": 10,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [RESPONSES_ITEM]},
                ],
            },
            "messages.1.content.0.compaction.created_by: Extra inputs are not permitted",
        ),
        (
            "anthropic",
            {
                "model": "m",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [ANTHROPIC_BLOCK]}],
            },
            "messages.0.content.0: compaction blocks are only allowed in assistant messages",
        ),
        (
            "anthropic",
            {
                "model": "m",
                "max_tokens": 10,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": "compaction", "content": ""}]},
                ],
            },
            "String should have at least 1 character",
        ),
    ],
)
def test_the_fake_server_refuses_a_compaction_the_api_would(
    fmt: str, body: dict[str, object], refusal: str
) -> None:
    with FakeServer() as server:
        status, data = post(server, fmt, json.dumps(body).encode())
    assert status == 400
    assert refusal in data.decode()


def test_the_fake_server_accepts_each_compaction_in_its_own_format() -> None:
    with FakeServer() as server:
        status, _ = post(
            server,
            "openai-responses",
            json.dumps(
                {"model": "m", "input": [RESPONSES_ITEM, {"role": "user", "content": "hi"}]}
            ).encode(),
        )
        assert status == 200
        status, _ = post(
            server,
            "anthropic",
            json.dumps(
                {
                    "model": "m",
                    "max_tokens": 10,
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {
                            "role": "assistant",
                            "content": [ANTHROPIC_BLOCK, {"type": "text", "text": "ok"}],
                        },
                        {"role": "user", "content": "go on"},
                    ],
                }
            ).encode(),
        )
        assert status == 200


def test_a_responses_transcript_keeps_its_compaction_item_byte_for_byte(
    log: Log, tmp_path: Path
) -> None:
    items = [
        {"type": "message", "role": "user", "content": "old question"},
        {"type": "message", "role": "assistant", "content": "old answer"},
        RESPONSES_ITEM,
        {"type": "message", "role": "user", "content": "new question"},
    ]
    path = tmp_path / "items.json"
    path.write_text(json.dumps(items), encoding="utf-8")
    import_file(log, path, format="openai_responses", session="s")
    [part] = native_parts(log)
    assert part.data == msgspec.json.encode(RESPONSES_ITEM).decode()
    assert json.loads(part.data)["encrypted_content"] == OPAQUE
    assert json.loads(export_session(log, "s", format="openai_responses")) == items
    body = json.loads(
        render(Packer(log).pack("s").prompt, "openai-responses", model="m", max_tokens=None)
    )
    assert body["input"][0] == RESPONSES_ITEM
    assert "old question" not in json.dumps(body)


def test_the_replay_of_a_request_holding_a_compaction_is_checked(log: Log) -> None:
    session, _, _ = converse(log, "openai-responses")
    replayer = Replayer(Packer(log))
    for seq in session.requests():
        assert replayer.replay("s", seq).ok


# -- properties: generated sessions holding provider compactions ---------------------------------
PROPS = settings(
    settings.default,
    deadline=None,
    max_examples=max(100, settings().max_examples),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _pack_or_none(view: Projection, policy: Policy) -> Packed | None:
    try:
        return pack(view, policy)
    except BudgetExceededError as exc:
        check_overflow(view, policy, exc)
        return None


@PROPS
@given(items=sessions(native=True), policy=policies(max_window=64_000))
def test_every_invariant_holds_with_provider_compactions(
    items: list[SessionItem], policy: Policy
) -> None:
    log = memory_log()
    session = build(log, "s", items)
    check_all(lambda: project(log, session), policy)
    view = project(log, session)
    # The latest provider compaction in the view, found from the events themselves.
    cut = max(
        (
            pos
            for pos, e in enumerate(view.events)
            if pos not in view.rewound
            and isinstance(e.body, AssistantMessageAdded)
            and any(isinstance(p, NativePart) for p in e.body.parts)
        ),
        default=-1,
    )
    assert view.cut == cut
    packed = _pack_or_none(view, policy)
    if packed is None or cut < 0:
        return
    # Nothing of the conversation before it is sent.
    assert all(pos >= cut for m in packed.prompt.messages for pos in m.source)
    for decision in packed.decisions:
        if decision.rule == "native.compaction":
            assert decision.pos < cut and decision.decision == "dropped"


@PROPS
@given(items=sessions(native=True), policy=policies(max_window=32_000), data=st.data())
def test_an_incremental_projection_with_provider_compactions_packs_like_a_fresh_one(
    items: list[SessionItem], policy: Policy, data: st.DataObject
) -> None:
    log = memory_log()
    session = build(log, "s", items)
    lineage = log.lineage(session)
    stops = set(data.draw(st.lists(st.integers(0, max(0, len(lineage) - 1)), max_size=4)))
    view = Projection(get_counter("cl100k_base"))
    for i, event in enumerate(lineage):
        view.apply(event)
        if i in stops:
            with contextlib.suppress(BudgetExceededError):
                pack(view, policy)  # fills the caches midway
    fresh = project(log, session)
    assert view.cut == fresh.cut
    a = _pack_or_none(view, policy)
    b = _pack_or_none(fresh, policy)
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert a.prompt.encode() == b.prompt.encode(), a.prompt.first_difference(b.prompt)
        assert a.decisions == b.decisions


@PROPS
@given(items=sessions(native=True), policy=policies(max_window=64_000), data=st.data())
def test_a_request_holding_a_provider_compaction_replays_after_later_appends(
    items: list[SessionItem], policy: Policy, data: st.DataObject
) -> None:
    split = data.draw(st.integers(1, max(1, len(items))))
    log = memory_log()
    session = build(log, "s", items[:split])
    replayer = Replayer(Packer(log))
    try:
        recorded = replayer.record(session, policy=policy)
    except BudgetExceededError:
        assume(False)
        return
    build(log, session, items[split:])
    assert Replayer(Packer(log)).replay(session, recorded.request_seq).ok


def test_the_command_shows_the_item_and_what_it_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    with turnlog.open(store) as opened:
        converse(opened, "anthropic")
    assert main(["--store", str(store), "log", "s"]) == 0
    listed = capsys.readouterr().out
    assert "(anthropic compaction) after it" in listed
    assert main(["--store", str(store), "explain", "s", "-1"]) == 0
    explained = capsys.readouterr().out
    assert explained.count("native.compaction") == 3  # hello, first, more
    assert main(["--store", str(store), "replay", "s"]) == 0
    assert "3 of 3 requests reproduced byte for byte" in capsys.readouterr().out


def test_erasing_the_compaction_brings_the_history_back(log: Log) -> None:
    session, _, _ = converse(log, "anthropic")
    cut = next(
        e.seq
        for e in log.read("s")
        if isinstance(e.body, AssistantMessageAdded)
        and any(isinstance(p, NativePart) for p in e.body.parts)
    )
    log.erase("s", [cut], reason="retention")
    assert not native_parts(log) and log.verify("s").ok
    session.user("still there?")
    body = session.prepare().body
    assert b"hello" in body and b"Summary so far" not in body
