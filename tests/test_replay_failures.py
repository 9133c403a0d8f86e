"""Replays that must fail: a copy of a store whose recorded request, policy or events were
changed no longer replays, and the result names the part that differs.

Each test records requests in a store, copies the store event by event into a fresh log
(the copy's chain is valid: the change is made before the copy re-hashes), changes one
thing on the way, and replays the copied requests: ``ok`` is False with a ``difference``
naming what changed, and ``check`` raises `ReplayMismatchError` saying the same. The
unchanged copy replays, so it is the change, not the copying, that fails the replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
import turnlog
from turnlog import Draft, Log, Packer, Policy, Replayer
from turnlog.errors import ReplayMismatchError
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    Event,
    PolicySet,
    RequestIssued,
    SystemSectionSet,
    TextPart,
    UserMessageAdded,
)

SESSION = "s"
POLICY = Policy(context_window=4_000, output_reserve=500)

#: Changes a copied event's payload (or returns it unchanged).
Change = Callable[[Event], Body]


def unchanged(event: Event) -> Body:
    return event.body


@pytest.fixture(params=["lmdb", "memory"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Log]:
    """A store holding a session with a system section, three turns and three requests."""
    location = str(tmp_path / "store") if request.param == "lmdb" else ":memory:"
    with turnlog.open(location) as log:
        replayer = Replayer(Packer(log))
        log.append(SESSION, SystemSectionSet(name="rules", text="Answer briefly."))
        for turn in range(3):
            log.append(SESSION, UserMessageAdded(text=f"question {turn}: what is {turn} + 1?"))
            replayer.record(SESSION, policy=POLICY, model="m", time=turn)
            log.append(SESSION, AssistantMessageAdded(parts=(TextPart(text=f"{turn + 1}."),)))
        yield log


def copy_with(source: Log, change: Change = unchanged, *, rehead: bool = True) -> Log:
    """A fresh log holding ``source``'s session, each payload passed through ``change``.

    With ``rehead`` a copied request record names the copy's hash of its head event (a
    consistent forgery, so that replay gets as far as re-packing); without it the
    record keeps the source's hash.
    """
    target = turnlog.open(":memory:")
    for event in source.read(SESSION):
        body = change(event)
        if rehead and isinstance(body, RequestIssued):
            head = target.get(SESSION, body.head_seq)
            body = msgspec.structs.replace(body, head_hash=head.hash.hex())
        target.append(SESSION, Draft(body=body, time=event.time, key=event.key))
    assert target.verify().ok  # the copy is a valid log: only replay can tell
    return target


def requests(log: Log) -> list[int]:
    return [event.seq for event in log.read(SESSION, kinds=["request"])]


def replays(log: Log) -> list[turnlog.replay.ReplayResult]:
    replayer = Replayer(Packer(log))
    return [replayer.replay(SESSION, seq) for seq in requests(log)]


def test_an_unchanged_copy_replays(source: Log) -> None:
    results = replays(copy_with(source))
    assert len(results) == 3
    assert all(result.ok for result in results), [r.difference for r in results]


def test_a_changed_prompt_hash_fails_replay_and_check(source: Log) -> None:
    last = requests(source)[-1]

    def forge(event: Event) -> Body:
        if event.seq == last and isinstance(event.body, RequestIssued):
            return msgspec.structs.replace(event.body, prompt_hash="0" * 64)
        return event.body

    copy = copy_with(source, forge)
    result = Replayer(Packer(copy)).replay(SESSION, last)
    assert result.ok is False
    assert result.recorded_hash == "0" * 64
    assert result.replayed_hash != result.recorded_hash
    # every part's digest still matches: the hash of the whole is what differs
    assert result.difference == "the parts match but the breakpoints differ"
    assert [r.ok for r in replays(copy)] == [True, True, False]
    with pytest.raises(ReplayMismatchError, match=rf"replay of {SESSION}#{last} differs"):
        Replayer(Packer(copy)).check(SESSION, last)


def test_a_changed_policy_fails_replay_naming_the_policy(source: Log) -> None:
    other = Policy(context_window=8_000, output_reserve=500).resolved()

    def swap(event: Event) -> Body:
        if isinstance(event.body, PolicySet):
            return PolicySet(policy=other)
        return event.body

    copy = copy_with(source, swap)
    results = replays(copy)
    assert [r.ok for r in results] == [False, False, False]
    for result in results:
        assert "is not the recorded one" in result.difference
        assert "policy in force" in result.difference
    with pytest.raises(ReplayMismatchError, match="policy in force"):
        Replayer(Packer(copy)).check(SESSION, results[0].request_seq)


def test_a_changed_event_fails_replay_naming_the_message(source: Log) -> None:
    def edit(event: Event) -> Body:
        if isinstance(event.body, UserMessageAdded) and event.body.text.startswith("question 1"):
            return UserMessageAdded(text="question 1: what is 1 + 2?")
        return event.body

    copy = copy_with(source, edit)
    results = replays(copy)
    # the first request was packed before the edited message: it still replays
    assert [r.ok for r in results] == [True, False, False]
    for result in results[1:]:
        assert result.difference.startswith("first difference at message"), result.difference
        assert result.replayed_hash != result.recorded_hash
    with pytest.raises(ReplayMismatchError, match="first difference at message"):
        Replayer(Packer(copy)).check(SESSION, results[1].request_seq)


def test_a_changed_system_section_fails_replay_naming_the_section(source: Log) -> None:
    def edit(event: Event) -> Body:
        if isinstance(event.body, SystemSectionSet):
            return SystemSectionSet(name="rules", text="Answer at length.")
        return event.body

    results = replays(copy_with(source, edit))
    assert [r.ok for r in results] == [False, False, False]
    assert all("first difference at system" in r.difference for r in results), [
        r.difference for r in results
    ]


def test_a_changed_event_under_an_unchanged_record_fails_on_the_head_hash(source: Log) -> None:
    def edit(event: Event) -> Body:
        if isinstance(event.body, UserMessageAdded) and event.body.text.startswith("question 0"):
            return UserMessageAdded(text="question 0: what is 0 + 2?")
        return event.body

    copy = copy_with(source, edit, rehead=False)
    results = replays(copy)
    assert [r.ok for r in results] == [False, False, False]
    for result in results:
        assert "no longer has the recorded hash" in result.difference
        assert result.replayed_hash == ""
    with pytest.raises(ReplayMismatchError, match="no longer has the recorded hash"):
        Replayer(Packer(copy)).check(SESSION, results[0].request_seq)
