"""Tampering with a stored log is caught by ``verify``, which names the place.

Most tests write an LMDB store, close it, change bytes inside ``data.mdb``
(found by a marker string unique to one event or one blob), reopen it and
check that `Log.verify` returns a failing report naming the exact session and
seq, never raising. The last one plants undecodable records through the
`Store` interface, on every backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import blake3
import msgspec
import pytest
import turnlog
from turnlog.events import Event, ToolResultAdded, UserMessageAdded
from turnlog.log import GENESIS, VerifyReport
from turnlog.stores import LMDBStore, WriteTxn

EVENT_MARKER = b"EVENT-MARKER-5c1e9a"
BLOB_MARKER = b"BLOB-MARKER-77d0b3"
MARKED_SEQ = 2
BLOB_SEQ = 4


def build(path: Path) -> dict[str, object]:
    """A store with two sessions; ``s#2`` holds the event marker, ``s#4`` a blob with the
    blob marker in the middle (outside the preview kept in the event). Returns facts."""
    padding = "p" * 3000  # a large record: stored once, on its own (overflow) pages
    output = "".join(f"output line {i}\n" for i in range(8_000))
    middle = len(output) // 2
    output = output[:middle] + BLOB_MARKER.decode() + output[middle:]
    with turnlog.open(path) as log:
        log.append("s", [UserMessageAdded(text="zero"), UserMessageAdded(text="one")])
        log.append("s", UserMessageAdded(text=f"{EVENT_MARKER.decode()} {padding}"))
        log.append("s", UserMessageAdded(text="three"))
        done = log.append("s", ToolResultAdded(call_id="c", tool_name="bash", output=output))
        log.append("s", UserMessageAdded(text="five"))
        log.append("t", [UserMessageAdded(text="other session")])
        assert done.first_seq == BLOB_SEQ
        body = log.get("s", BLOB_SEQ).body
        assert isinstance(body, ToolResultAdded)
        assert body.blob is not None and BLOB_MARKER.decode() not in body.output
        events = log.read("s")
        assert log.verify().ok
        return {
            "blob": body.blob.hash,
            "hashes": [e.hash for e in events],
            "prevs": [e.prev for e in events],
        }


def patch(path: Path, needle: bytes, change: Callable[[bytearray, int], None]) -> int:
    """Apply ``change(data, offset)`` at every occurrence of ``needle`` in ``data.mdb``.

    Returns the number of occurrences (stale copies in free pages are changed too;
    only the live one matters).
    """
    data_file = path / "data.mdb"
    data = bytearray(data_file.read_bytes())
    found = 0
    start = data.find(needle)
    while start != -1:
        change(data, start)
        found += 1
        start = data.find(needle, start + 1)
    data_file.write_bytes(bytes(data))
    return found


def flip_low_bit(offset: int) -> Callable[[bytearray, int], None]:
    """A change that flips the lowest bit of the byte ``offset`` bytes into the match."""

    def change(data: bytearray, start: int) -> None:
        data[start + offset] ^= 0x01

    return change


def set_byte(offset: int, value: int) -> Callable[[bytearray, int], None]:
    """A change that overwrites the byte ``offset`` bytes into the match with ``value``."""

    def change(data: bytearray, start: int) -> None:
        data[start + offset] = value

    return change


def verify_reopened(path: Path) -> tuple[VerifyReport, VerifyReport, VerifyReport]:
    """Reopen the store; verify all, session ``s`` alone and session ``t`` alone."""
    with turnlog.open(path) as log:
        return log.verify(), log.verify("s"), log.verify("t")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The directory of a freshly built, closed store."""
    path = tmp_path / "store"
    build(path)
    return path


@pytest.mark.parametrize(
    ("how", "change", "reason"),
    [
        ("a letter of the text changed", flip_low_bit(3), "does not match the content"),
        ("an invalid UTF-8 byte in the text", set_byte(3, 0xFF), "does not decode"),
    ],
    ids=["letter", "invalid-utf8"],
)
def test_verify_names_the_event_whose_bytes_changed(
    store: Path, how: str, change: Callable[[bytearray, int], None], reason: str
) -> None:
    assert patch(store, EVENT_MARKER, change) >= 1, how
    everything, session, other = verify_reopened(store)
    for report in (everything, session):
        assert isinstance(report, VerifyReport)
        assert not report.ok
        assert report.problem is not None
        assert (report.problem.session, report.problem.seq) == ("s", MARKED_SEQ)
        assert reason in report.problem.reason
        assert f"s#{MARKED_SEQ}" in str(report.problem)
    assert other.ok


def test_verify_names_the_event_whose_stored_hash_changed(tmp_path: Path) -> None:
    path = tmp_path / "store"
    facts = build(path)
    seq = 1
    header = facts["prevs"][seq] + facts["hashes"][seq]  # type: ignore[index]
    assert patch(path, header, flip_low_bit(40)) >= 1
    everything, session, _ = verify_reopened(path)
    for report in (everything, session):
        assert not report.ok and report.problem is not None
        assert (report.problem.session, report.problem.seq) == ("s", seq)


def test_verify_names_the_event_that_references_a_changed_blob(tmp_path: Path) -> None:
    path = tmp_path / "store"
    facts = build(path)
    assert patch(path, BLOB_MARKER, flip_low_bit(5)) >= 1
    everything, session, other = verify_reopened(path)
    for report in (everything, session):
        assert not report.ok and report.problem is not None
        assert (report.problem.session, report.problem.seq) == ("s", BLOB_SEQ)
        assert report.problem.blob == facts["blob"]
        assert "blob" in report.problem.reason
    assert other.ok


def test_changed_event_reads_back_changed_or_raises_a_kernel_error(store: Path) -> None:
    # Reading does not verify, but it must never fail with anything but a KernelError.
    patch(store, EVENT_MARKER, set_byte(3, 0xFF))
    with turnlog.open(store) as log, pytest.raises(turnlog.errors.StoreCorruptError) as info:
        log.read("s")
    assert "turnlog verify" in str(info.value)


def test_untouched_store_verifies_after_reopen(store: Path) -> None:
    everything, session, other = verify_reopened(store)
    assert everything.ok and session.ok and other.ok
    assert (everything.sessions, everything.events, everything.blobs) == (2, 7, 1)


def _garbage_records() -> dict[str, bytes]:
    """Canonical-looking bytes that do not decode as an event, by kind of damage."""
    good = msgspec.msgpack.Encoder(order="deterministic").encode(
        Event(session="x", seq=0, body=UserMessageAdded(text="hello"), meta={"a": 1})
    )
    return {
        "invalid-utf8": good.replace(b"hello", b"h\xffllo"),
        "nested-200000-deep": good.replace(b"\xa1a\x01", b"\xa1a" + b"\x91" * 200_000 + b"\x01"),
        "truncated": good[: len(good) // 2],
        "not-msgpack": b"\xc1" * 10,
        "a-bare-int": b"\x05",
    }


@pytest.mark.parametrize("kind", sorted(_garbage_records()))
def test_verify_reports_a_record_that_does_not_decode(log: turnlog.Log, kind: str) -> None:
    # Damage written through the Store interface, so it runs on every backend.
    log.append("s", UserMessageAdded(text="intact"))
    canonical = _garbage_records()[kind]
    digest = blake3.blake3(GENESIS + canonical).digest()

    def plant(txn: WriteTxn) -> None:
        txn.put_event("x", 0, GENESIS + digest + canonical)
        txn.set_head("x", 0, digest)

    log.store.write(plant)
    report = log.verify()
    assert not report.ok and report.problem is not None
    assert (report.problem.session, report.problem.seq) == ("x", 0)
    assert "does not decode" in report.problem.reason
    assert log.verify("s").ok
    with pytest.raises(turnlog.errors.StoreCorruptError):
        log.read("x")


def test_verify_names_a_self_consistent_event_that_does_not_link_to_its_predecessor(
    log: turnlog.Log,
) -> None:
    # A record whose own hash checks out, spliced in after an event it does not follow.
    log.append("s", UserMessageAdded(text="intact"))
    first = log.append("x", UserMessageAdded(text="zero"))
    encode = msgspec.msgpack.Encoder(order="deterministic").encode
    canonical = encode(Event(session="x", seq=1, body=UserMessageAdded(text="spliced")))
    elsewhere = bytes(range(32))
    digest = blake3.blake3(elsewhere + canonical).digest()
    assert elsewhere != first.head_hash

    def splice(txn: WriteTxn) -> None:
        txn.put_event("x", 1, elsewhere + digest + canonical)
        txn.set_head("x", 1, digest)

    log.store.write(splice)
    report = log.verify()
    assert not report.ok and report.problem is not None
    assert (report.problem.session, report.problem.seq) == ("x", 1)
    assert "prev" in report.problem.reason
    assert log.verify("s").ok


def test_verify_names_a_head_that_points_past_the_events(log: turnlog.Log) -> None:
    done = log.append("x", [UserMessageAdded(text="a"), UserMessageAdded(text="b")])
    log.store.write(lambda txn: txn.set_head("x", 5, done.head_hash))
    report = log.verify()
    assert not report.ok and report.problem is not None
    assert report.problem.session == "x" and "head" in report.problem.reason


def _lmdb_log(tmp_path: Path) -> tuple[turnlog.Log, LMDBStore]:
    log = turnlog.open(tmp_path / "store")
    assert isinstance(log.store, LMDBStore)
    return log, log.store


def test_verify_names_a_missing_event_below_the_head(tmp_path: Path) -> None:
    log, store = _lmdb_log(tmp_path)
    with log:
        log.append("x", [UserMessageAdded(text=t) for t in ("a", "b", "c", "d")])
        with store._env.begin(write=True) as txn:  # damage no append can do
            assert txn.delete(b"x\x00" + (2).to_bytes(8, "big"), db=store._dbs[b"events"])
        report = log.verify()
        assert not report.ok and report.problem is not None
        assert (report.problem.session, report.problem.seq) == ("x", 2)
        assert "missing" in report.problem.reason


def test_verify_names_an_event_past_the_head(tmp_path: Path) -> None:
    log, store = _lmdb_log(tmp_path)
    with log:
        log.append("x", [UserMessageAdded(text=t) for t in ("a", "b", "c")])
        store.write(lambda txn: txn.set_head("x", 1, log.get("x", 1).hash))
        report = log.verify()
        assert not report.ok and report.problem is not None
        assert report.problem.session == "x"
        assert "head says seq 1 but the events end at seq 2" in report.problem.reason


def test_verify_sees_events_left_past_the_head_after_a_gap(tmp_path: Path) -> None:
    # Reads stop at the head; verify must still see every key the session holds.
    log, store = _lmdb_log(tmp_path)
    with log:
        log.append("x", [UserMessageAdded(text=t) for t in ("a", "b", "c", "d")])
        with store._env.begin(write=True) as txn:
            assert txn.delete(b"x\x00" + (2).to_bytes(8, "big"), db=store._dbs[b"events"])
        store.write(lambda txn: txn.set_head("x", 1, log.get("x", 1).hash))
        assert [e.seq for e in log.read("x")] == [0, 1]
        report = log.verify()
        assert not report.ok and report.problem is not None
        assert (report.problem.session, report.problem.seq) == ("x", 2)


def test_verify_reports_a_malformed_head_entry_instead_of_raising(tmp_path: Path) -> None:
    log, store = _lmdb_log(tmp_path)
    with log:
        log.append("y", [UserMessageAdded(text=t) for t in ("a", "b")])
        with store._env.begin(write=True) as txn:
            head = txn.get(b"y", db=store._dbs[b"heads"])
            assert head is not None
            txn.put(b"y", head[:39], db=store._dbs[b"heads"])
        report = log.verify()
        assert not report.ok and report.problem is not None
        assert report.problem.session == "y"


# -- forks: a fork's history is the source session's events up to the fork point ----------
FORK_MARKER = b"FORK-SOURCE-MARKER-3b9f"


def build_forks(path: Path) -> None:
    """``src`` with the marker at seq 1; ``fork`` forked from ``src#2``, ``fork2`` from
    ``fork#2`` (a fork of a fork); ``src`` goes on past the fork point."""
    with turnlog.open(path) as log:
        log.append(
            "src",
            [
                UserMessageAdded(text="zero"),
                UserMessageAdded(text=f"{FORK_MARKER.decode()} one"),
                UserMessageAdded(text="two"),
                UserMessageAdded(text="three"),
            ],
        )
        log.fork("src", 2, "fork")
        log.append("fork", UserMessageAdded(text="fork one"))
        log.fork("fork", 1, "fork2")
        log.append("fork2", UserMessageAdded(text="fork2 one"))
        assert log.verify().ok


@pytest.mark.parametrize("session", ["fork", "fork2"])
def test_verify_of_a_fork_checks_the_history_it_was_forked_from(
    tmp_path: Path, session: str
) -> None:
    build_forks(tmp_path)
    with turnlog.open(tmp_path) as log:
        key = b"k" * 32
        signed = log.checkpoint(session, key=key)
        plain = log.checkpoint(session)
        assert log.verify(session, checkpoint=signed, key=key).ok
    assert patch(tmp_path, FORK_MARKER, flip_low_bit(0)) >= 1
    with turnlog.open(tmp_path, readonly=True) as log:
        for report in (
            log.verify(session),
            log.verify(checkpoint=signed, key=key),
            log.verify(session, checkpoint=plain),
            log.verify(),
        ):
            assert not report.ok
            assert report.problem is not None
            assert (report.problem.session, report.problem.seq) == ("src", 1)
        assert log.verify("src").problem == log.verify().problem
        # The fork's own events are intact, and its lineage is what was checked.
        assert "forked from" in log.verify(session).problem.reason  # type: ignore[union-attr]


def test_verify_of_a_fork_counts_the_history_it_checked(tmp_path: Path) -> None:
    build_forks(tmp_path)
    with turnlog.open(tmp_path, readonly=True) as log:
        report = log.verify("fork2")
        # fork2: 2 events; fork#0..1: 2 events; src#0..2: 3 events.
        assert report.ok and (report.sessions, report.events) == (3, 7)
        assert len(log.lineage("fork2")) == 7


def test_cli_verify_of_a_fork_fails_on_a_change_in_its_source(tmp_path: Path) -> None:
    build_forks(tmp_path)
    script = str(Path(sys.executable).with_name("turnlog"))
    env = {**os.environ, "TURNLOG_STORE": str(tmp_path)}

    def sh(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, *argv], capture_output=True, text=True, env=env, timeout=120, check=False
        )

    cp_file = tmp_path / "fork.cp.json"
    key_file = tmp_path / "key"
    key_file.write_bytes(b"k" * 32)
    assert (
        sh("checkpoint", "fork", "--key-file", str(key_file), "--output", str(cp_file)).returncode
        == 0
    )
    assert sh("verify", "fork").returncode == 0
    patch(tmp_path, FORK_MARKER, flip_low_bit(0))
    for argv in (
        ("verify", "fork"),
        ("verify", "--checkpoint", str(cp_file), "--key-file", str(key_file)),
    ):
        done = sh(*argv)
        assert done.returncode == 1, done
        assert "src#1" in done.stdout


def _rehashed_records() -> dict[str, tuple[bytes, str]]:
    """Bytes for x#1 that a writer computing the hashes itself could store, each with
    what `verify(strict=True)` says about it: they do not decode or are not canonical."""
    good = msgspec.msgpack.Encoder(order="deterministic").encode(
        Event(session="x", seq=1, body=UserMessageAdded(text="hello"), meta={"a": 1})
    )
    assert b"\xa1a\x01" in good
    return {
        "invalid-utf8": (good.replace(b"hello", b"h\xffllo"), "does not decode"),
        "non-minimal-int": (
            good.replace(b"\xa1a\x01", b"\xa1a\xcc\x01"),
            "not the canonical encoding",
        ),
        # one more map entry (the fixmap header counts it): a field the schema lacks
        "unknown-field": (bytes([good[0] + 1]) + good[1:] + b"\xa3zzz\x01", "does not decode"),
    }


@pytest.mark.parametrize("kind", sorted(_rehashed_records()))
def test_only_strict_verify_reports_a_rehashed_record_that_is_not_what_turnlog_writes(
    log: turnlog.Log, kind: str
) -> None:
    # The chain holds (the writer hashed these bytes), so the chain check accepts the
    # record; the strict level decodes it and re-encodes it, and names it.
    first = log.append("x", UserMessageAdded(text="zero"))
    canonical, reason = _rehashed_records()[kind]
    digest = blake3.blake3(first.head_hash + canonical).digest()

    def plant(txn: WriteTxn) -> None:
        txn.put_event("x", 1, first.head_hash + digest + canonical)
        txn.set_head("x", 1, digest)

    log.store.write(plant)
    assert log.verify().ok
    for report in (log.verify(strict=True), log.verify("x", strict=True)):
        assert not report.ok and report.problem is not None
        assert (report.problem.session, report.problem.seq) == ("x", 1)
        assert reason in report.problem.reason
    if reason == "does not decode":  # reading it names it too
        with pytest.raises(turnlog.errors.StoreCorruptError, match=r"event x#1 is unreadable"):
            log.read("x")
        assert log.read("x", 0, 1)[0].seq == 0


def test_either_level_names_every_changed_byte_of_every_record() -> None:
    # Every byte of every stored record of a small log (one referencing a blob),
    # changed in turn and planted with the rest through the Store interface into a
    # fresh store: both levels name the changed record's seq.
    source = turnlog.Log(turnlog.stores.MemoryStore(), blob_threshold=4_096, preview_chars=1_024)
    source.append(
        "x",
        [
            UserMessageAdded(text="zero"),
            UserMessageAdded(text="one"),
            ToolResultAdded(call_id="c", tool_name="bash", output="o" * 6_000),
        ],
    )
    with source.store.read() as txn:
        records = [record for _, record in txn.scan("x", 0, None)]
        blobs = list(txn.blobs())
        head = txn.head("x")
    assert head is not None and blobs

    def planted(changed: list[bytes]) -> turnlog.Log:
        log = turnlog.Log(turnlog.stores.MemoryStore())

        def plant(txn: WriteTxn) -> None:
            txn.put_events("x", 0, changed)
            for digest, data in blobs:
                txn.put_blob(digest, data)
            txn.set_head("x", *head)

        log.store.write(plant)
        return log

    assert planted(records).verify(strict=True).ok
    for seq, record in enumerate(records):
        for at in range(len(record)):
            changed = bytearray(record)
            changed[at] ^= 0x01
            log = planted([*records[:seq], bytes(changed), *records[seq + 1 :]])
            for strict in (False, True):
                report = log.verify("x", strict=strict)
                assert not report.ok and report.problem is not None, (seq, at, strict)
                assert report.problem.seq == seq, (seq, at, strict, report.problem)


@pytest.mark.parametrize(
    ("damage", "seq", "reason"),
    [
        ("delete", 2, "has no entry for the event's key 'k2'"),
        ("move", 2, "maps the event's key 'k2' to seq 0"),
        ("add", 1, "holds the key 'stray' at seq 1, where the session has an event without a key"),
        ("alias", 3, "holds the key 'k9' at seq 3, where the session has an event keyed 'k3'"),
    ],
)
def test_verify_names_an_idempotency_index_entry_changed_behind_turnlogs_back(
    tmp_path: Path, damage: str, seq: int, reason: str
) -> None:
    """A deleted entry would let a retry append its key twice; a wrong one would take
    another event for a duplicate."""
    log, store = _lmdb_log(tmp_path)
    with log:
        log.append("x", [UserMessageAdded(text="a"), UserMessageAdded(text="b")])
        log.append(
            "x",
            [
                turnlog.Draft(body=UserMessageAdded(text=t), key=f"k{n}")
                for n, t in ((2, "c"), (3, "d"))
            ],
        )
        log.append("y", turnlog.Draft(body=UserMessageAdded(text="y"), key="k2"))
        assert log.verify().ok
        with store._env.begin(write=True) as txn:  # damage no append can do
            idem = store._dbs[b"idem"]
            if damage == "delete":
                assert txn.delete(b"x\x00k2", db=idem)
            elif damage == "move":
                txn.put(b"x\x00k2", (0).to_bytes(8, "big"), db=idem)
            elif damage == "add":
                txn.put(b"x\x00stray", (1).to_bytes(8, "big"), db=idem)
            else:
                txn.put(b"x\x00k9", (3).to_bytes(8, "big"), db=idem)
        for report in (log.verify(), log.verify("x")):
            assert not report.ok and report.problem is not None
            assert (report.problem.session, report.problem.seq) == ("x", seq)
            assert reason in report.problem.reason and "turnlog copy" in report.problem.reason
        assert log.verify("y").ok
