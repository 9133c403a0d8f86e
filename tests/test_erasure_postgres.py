"""Erasure on PostgreSQL: the same operation, and no erased byte left in the server's
table files after the documented step (VACUUM (FULL) of the events and blobs tables,
then CHECKPOINT), searched for in the data directory of a real server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pgserver
import pytest
import turnlog
from turnlog import Packer, Policy, Replayer
from turnlog.events import (
    AssistantMessageAdded,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)

pytestmark = pytest.mark.skipif(not pgserver.available(), reason=pgserver.SKIP_REASON)

SECRET = "pg-SECRET-USER-MESSAGE-5150"
TOOL_SECRET = "pg-TOOL-OUTPUT-PASSWORD-"


def _files_holding(root: Path, needle: bytes, *, skip: str = "pg_wal") -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and skip not in path.parts:
            try:
                if needle in path.read_bytes():
                    found.append(str(path.relative_to(root)))
            except OSError:
                continue
    return found


def test_erase_on_postgres_leaves_no_dead_copy_in_the_table_files() -> None:
    server = pgserver.shared()
    schema = "erase_" + uuid.uuid4().hex[:8]
    with turnlog.open(server.url(schema=schema)) as log:
        replayer = Replayer(Packer(log))
        policy = Policy(context_window=200_000, output_reserve=500)
        log.append("s", UserMessageAdded(text=f"my key is {SECRET}"))
        replayer.record("s", policy=policy, model="m")
        log.append(
            "s",
            AssistantMessageAdded(
                parts=(TextPart(text="reading"), ToolCall(id="c1", name="cat", arguments="{}"))
            ),
        )
        log.append("s", ToolResultAdded(call_id="c1", tool_name="cat", output=TOOL_SECRET * 8000))
        log.append("other", UserMessageAdded(text="kept"))
        log.store.scrub()  # so that the text is in the table files before the erase
        assert _files_holding(server.data, SECRET.encode())
        erased = log.erase("s", [0, 4], reason="gdpr")
        assert erased.seqs == (0, 4) and len(erased.blobs) == 1
        report = log.verify()
        assert report.ok, report.problem
        assert [(s, q) for s, q, _ in report.erased] == [("s", 0), ("s", 4)]
        [result] = list(replayer.replay_all("s"))
        assert result.erased_by == erased.seq
        assert log.erase("s", [0], reason="again").seq is None
        events = log.read("s")
        assert events[0].kind == "erased"
    assert _files_holding(server.data, SECRET.encode()) == []
    assert _files_holding(server.data, TOOL_SECRET.encode()) == []


@pytest.mark.parametrize("recycle", ["off", "on"])
def test_with_wal_recycle_off_no_wal_segment_holds_the_erased_text(recycle: str) -> None:
    """The documented server setting (docs/erasure.md, "The WAL"): with ``wal_recycle =
    off`` the scrub's WAL switch and checkpoint remove every segment written before the
    erasure, and the whole data directory, pg_wal included, holds no erased byte; with
    the default (on) the segments are renamed for reuse and still hold it."""
    server = pgserver.Server(settings={"wal_recycle": recycle, "full_page_writes": "on"})
    try:
        with turnlog.open(server.url(schema="wal")) as log:
            log.append("s", UserMessageAdded(text=f"my key is {SECRET}"))
            log.append(
                "s", ToolResultAdded(call_id="c1", tool_name="cat", output=TOOL_SECRET * 8000)
            )
            log.append("other", UserMessageAdded(text="kept"))
            assert _files_holding(server.data, SECRET.encode(), skip="-")  # in the WAL now
            log.erase("s", [0, 1], reason="gdpr")
            assert log.verify().ok
            assert [e.kind for e in log.read("other")] == ["user"]
        left = _files_holding(server.data, SECRET.encode(), skip="-") + _files_holding(
            server.data, TOOL_SECRET.encode(), skip="-"
        )
        if recycle == "off":
            assert left == []
        else:
            assert left and all(path.startswith("pg_wal") for path in left), left
    finally:
        server.stop()
