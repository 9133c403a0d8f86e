"""Short runs of the load scripts in tests/bench (the long runs: docs/reliability.md).

Four processes append to one session with ``expected_seq`` and retry on
conflict: no event is lost or duplicated, every conflict is reported, the chain
verifies (the checks live in `tests.bench.load_append.run`). A small soak packs
every turn of many sessions and verifies the store at the end.
"""

from __future__ import annotations

from pathlib import Path

from tests.bench import load_append, load_soak


def test_four_processes_appending_to_one_session_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    result = load_append.run(tmp_path / "store", procs=4, seconds=3.0, sync=False)
    assert result["events"] > 0
    assert result["attempts"] == result["events"] + result["conflicts"]
    assert all(n > 0 for n in result["per_worker"]), result["per_worker"]


def test_a_short_soak_packs_every_turn_and_verifies(tmp_path: Path) -> None:
    rows = load_soak.run(
        tmp_path / "store",
        events=2_000,
        sessions=20,
        active=5,
        cached=3,
        every=1_000,
        progress=False,
    )
    assert [r["events"] // 1_000 for r in rows] == [1, 2]
    assert rows[-1]["sessions"] == 20  # every session started (and the store verified)
