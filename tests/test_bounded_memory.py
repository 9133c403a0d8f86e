"""Caches that a long-running process keeps are bounded and never change a result.

* `Packer` keeps at most ``cached_sessions`` projections; a session packed
  again after its projection was dropped packs to the same bytes.
* `TiktokenCounter` keeps at most ``max_cached`` counts in two generations;
  every count equals the encoding's own.
* A projection's items and units are out of the cyclic garbage collector, so
  full collections do not grow with the events cached.
"""

from __future__ import annotations

import gc
from typing import Any

import hypothesis.strategies as st
import pytest
import turnlog
from hypothesis import given, settings
from turnlog import Packer, Policy
from turnlog._tokens import TiktokenCounter, _load_encoding
from turnlog.errors import InvalidArgumentError
from turnlog.events import (
    AssistantMessageAdded,
    PolicySet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.packing import Projection, TokenCounter

POLICY = Policy(context_window=2_000, output_reserve=200)
SESSIONS = ("a", "b", "c", "d")


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(SESSIONS), st.booleans(), st.integers(1, 40)),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 3),
)
def test_a_bounded_packer_packs_what_an_unbounded_one_packs(
    steps: list[tuple[str, bool, int]], cached: int
) -> None:
    log = turnlog.open(":memory:")
    small = Packer(log, cached_sessions=cached)
    large = Packer(log, cached_sessions=len(SESSIONS))
    for n, (session, append, words) in enumerate(steps):
        if append or log.head(session) is None:
            log.append(
                session,
                [
                    UserMessageAdded(text=f"question {n} " * words),
                    AssistantMessageAdded(parts=(TextPart(text=f"answer {n}"),)),
                ],
            )
        got = small.pack(session, policy=POLICY, explain=False)
        want = large.pack(session, policy=POLICY, explain=False)
        assert got.prompt == want.prompt
        assert len(small._projections) <= cached


def test_the_least_recently_packed_session_is_dropped() -> None:
    log = turnlog.open(":memory:")
    packer = Packer(log, cached_sessions=2)
    for session in ("a", "b", "c"):
        log.append(session, UserMessageAdded(text=f"hello {session}"))
    packer.pack("a", policy=POLICY)
    packer.pack("b", policy=POLICY)
    packer.pack("a", policy=POLICY)  # a is now the most recent
    packer.pack("c", policy=POLICY)
    assert [name for name, _ in packer._projections] == ["a", "c"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None, True])
def test_cached_sessions_is_validated(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="cached_sessions"):
        Packer(turnlog.open(":memory:"), cached_sessions=bad)  # type: ignore[arg-type]


@settings(deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=80), st.integers(2, 9))
def test_a_bounded_count_cache_counts_like_the_encoding(texts: list[str], limit: int) -> None:
    counter = TiktokenCounter("cl100k_base", max_cached=limit)
    encoding: Any = _load_encoding("cl100k_base", None)  # the offline encoding, uncached
    for text in texts + texts[::-1]:
        assert counter.count(text) == len(encoding.encode_ordinary(text))
        assert counter.cached <= limit


def test_a_count_in_use_stays_cached() -> None:
    counter = TiktokenCounter("cl100k_base", max_cached=4)
    encoded: list[str] = []
    encoding = counter._encoding

    class Spy:
        def encode_ordinary(self, text: str) -> list[int]:
            encoded.append(text)
            return list(encoding.encode_ordinary(text))

    counter._encoding = Spy()
    for i in range(20):
        counter.count(f"other {i}")
        counter.count("kept")  # found in the young or old generation, moved to the young
        assert counter.cached <= 4
    assert encoded.count("kept") == 1
    assert len(encoded) == 21
    assert counter.cached == len(set(counter._cache) | set(counter._old))  # none counted twice


@pytest.mark.parametrize("bad", [1, 0, 2.5, "10", True])
def test_max_cached_is_validated(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="max_cached"):
        TiktokenCounter("cl100k_base", max_cached=bad)  # type: ignore[arg-type]


def test_the_policy_in_force_is_read_from_an_up_to_date_projection() -> None:
    # Another pack may drop the session's projection while the policy is looked up;
    # the answer must come from the projection brought up to date, not the old one.
    log = turnlog.open(":memory:")
    for session in ("a", "b"):
        log.append(session, UserMessageAdded(text="hi"))
    packer = Packer(log, cached_sessions=1)
    packer.pack("a", policy=POLICY)
    log.append("a", PolicySet(policy=Policy(keep_recent_turns=7)))
    real = packer.projection

    def racing(session: str, counter: TokenCounter) -> Projection:
        real("b", counter)  # what a pack in another thread can do meanwhile
        return real(session, counter)

    packer.projection = racing  # type: ignore[method-assign]
    found = packer.policy_in_force("a")
    assert found is not None and found.keep_recent_turns == 7


def test_projections_add_no_objects_for_the_garbage_collector_to_walk() -> None:
    log = turnlog.open(":memory:")
    for i in range(200):
        log.append(
            "s",
            [
                UserMessageAdded(text=f"question {i}"),
                AssistantMessageAdded(
                    parts=(
                        TextPart(text="looking"),
                        *(
                            ToolCall(
                                id=f"c{i}.{k}", name="Read", arguments=f'{{"file_path": "f{k}.py"}}'
                            )
                            for k in range(2)
                        ),
                    )
                ),
                *(
                    ToolResultAdded(
                        call_id=f"c{i}.{k}",
                        tool_name="Read",
                        output=f"line one of file {k}, long enough to be quoted\n" * 3,
                    )
                    for k in range(2)
                ),
            ],
        )
    log.append("warm-up", UserMessageAdded(text="hello"))
    packer = Packer(log)
    packer.pack("warm-up", policy=POLICY)  # first-use imports and caches
    gc.collect()
    before = len(gc.get_objects())
    packer.pack("s", policy=POLICY)
    view = packer.projection("s", packer.counter_for(POLICY))
    gc.collect()  # a collection untracks tuples that hold only untracked values
    assert len(view.items) == 800 and len(view.units) == 400
    tracked: list[object] = [o for o in (*view.items, *view.units) if gc.is_tracked(o)]
    tracked += [u.items for u in view.units if gc.is_tracked(u.items)]
    assert tracked == []
    # What the projection keeps that the collector walks: about a hundred objects (its
    # indexes and caches, the rules 3 replay memo and the rewrites' basis, whose lists
    # grow in length, not in number: 108 today), not several per event (800 items).
    assert len(gc.get_objects()) - before < 150
