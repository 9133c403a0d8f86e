"""Crash safety of the LMDB store: SIGKILL at random moments loses nothing acknowledged.

A child process (a fresh interpreter, never a fork of an open handle) appends
keyed batches of `BATCH` events in a loop and acknowledges each batch on its
stdout, one flushed line per batch, after ``append`` returned. The parent kills
it with SIGKILL at a random moment, reopens the store and checks:

* every acknowledged batch is present, at the position the child was told;
* every batch is all there or absent (never part of one), in key order;
* the chain verifies;
* retrying the batch that was begun but not acknowledged, with the same
  idempotency keys, either reports it as a duplicate or appends it once.

The default run does a few rounds; ``-m slow`` does `SLOW_ROUNDS`.
"""

from __future__ import annotations

import inspect
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import turnlog
from support import texts
from turnlog import Draft, Log
from turnlog.errors import ForkedProcessError
from turnlog.events import UserMessageAdded

BATCH = 5
SESSION = "crash"
FAST_ROUNDS = 4
SLOW_ROUNDS = 500
TIMEOUT = 30.0


def batch(i: int) -> list[Draft]:
    """Batch ``i``: `BATCH` user messages keyed ``b{i}-{j}``; the same every time."""
    return [
        Draft(
            body=UserMessageAdded(text=f"batch {i} event {j}"),
            key=f"b{i}-{j}",
            meta={"batch": i, "j": j},
        )
        for j in range(BATCH)
    ]


APPENDER = "\n".join(
    [
        "from __future__ import annotations",
        "import sys",
        "import turnlog",
        "from turnlog import Draft",
        "from turnlog.events import UserMessageAdded",
        f"BATCH = {BATCH}",
        inspect.getsource(batch),
        textwrap.dedent(f"""
    log = turnlog.open(sys.argv[1])
    i = int(sys.argv[2])
    out = sys.stdout
    out.write("ready\\n")
    out.flush()
    while True:
        out.write(f"begin {{i}}\\n")
        out.flush()
        done = log.append({SESSION!r}, batch(i))
        out.write(f"ack {{i}} {{done.first_seq}}\\n")
        out.flush()
        i += 1
    """),
    ]
)


@dataclass
class Tally:
    """What the crash rounds saw."""

    rounds: int = 0
    acked: int = 0
    landed_unacked: int = 0  # begun, killed before the ack, found complete in the store
    absent_unacked: int = 0  # begun, killed before the ack, absent (then retried)
    positions: dict[int, int] = field(default_factory=dict)  # batch -> first seq (acked)


class Child:
    """A child interpreter whose stdout is read without read-ahead.

    Its stdout is an unbuffered pipe read line by line, so no line the child
    wrote before it was killed can sit in a parent-side buffer and be missed;
    its stderr goes to a file (a pipe nobody reads could fill up and block it).
    """

    def __init__(self, script: Path, *args: str) -> None:
        self.errors = script.with_suffix(".stderr")
        with self.errors.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=err, bufsize=0
            )

    def stderr(self) -> str:
        """What the child wrote to stderr so far."""
        return self.errors.read_text(errors="replace")

    def wait_for_line(self, expected: str) -> list[str]:
        """Read stdout lines until one starts with ``expected`` (fails on EOF).

        Returns the lines read, the matching one included.
        """
        assert self.proc.stdout is not None
        seen: list[str] = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"child ended before printing {expected!r}: {self.stderr()}")
            seen.append(line.decode().strip())
            if seen[-1].startswith(expected):
                return seen

    def kill(self) -> str:
        """SIGKILL the child; return the rest of its stdout."""
        assert self.proc.stdout is not None
        self.proc.send_signal(signal.SIGKILL)
        rest = self.proc.stdout.read()
        self.proc.stdout.close()
        self.proc.wait(timeout=TIMEOUT)
        assert self.proc.returncode == -signal.SIGKILL, self.stderr()
        return rest.decode()

    def finish(self) -> tuple[int, str]:
        """Wait for the child to exit by itself; return its exit code and stdout."""
        assert self.proc.stdout is not None
        rest = self.proc.stdout.read()
        self.proc.stdout.close()
        return self.proc.wait(timeout=TIMEOUT), rest.decode()

    def stop(self) -> None:
        """Kill the child if it still runs (cleanup)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()


def check_store(log: Log, tally: Tally, acked: dict[int, int], begun: int | None) -> set[int]:
    """Check the invariants listed in the module docstring; return the batches present."""
    report = log.verify()
    assert report.ok, str(report.problem)
    if log.head(SESSION) is None:
        assert not tally.positions and not acked
        return set()
    events = log.read(SESSION)
    present: dict[int, list[int]] = {}
    for event in events:
        present.setdefault(event.meta["batch"], []).append(event.seq)
    for i, seqs in present.items():
        assert len(seqs) == BATCH, f"batch {i} is partly there: {seqs}"
        assert seqs == list(range(seqs[0], seqs[0] + BATCH)), f"batch {i} is split: {seqs}"
        assert [events[s].key for s in seqs] == [f"b{i}-{j}" for j in range(BATCH)]
    for i, first in {**tally.positions, **acked}.items():
        assert present.get(i, [None])[0] == first, f"acknowledged batch {i} is missing"
    unexplained = set(present) - set(tally.positions) - set(acked) - {begun}
    assert not unexplained, f"batches nobody began or acknowledged: {unexplained}"
    return set(present)


def crash_rounds(path: Path, rounds: int, seed: int, *, after_first_ack: float) -> Tally:
    """Run ``rounds`` append-and-SIGKILL rounds against the store at ``path``.

    With probability ``after_first_ack`` a round waits for the child's first
    acknowledgement before its random delay (so a slow machine still gets
    batches acknowledged); otherwise the delay starts when the child is ready.
    """
    rng = random.Random(seed)
    script = path.parent / "appender.py"
    script.write_text(APPENDER)
    tally = Tally()
    next_batch = 0
    for _ in range(rounds):
        child = Child(script, str(path), str(next_batch))
        try:
            lines = child.wait_for_line("ready")
            if rng.random() < after_first_ack:
                lines += child.wait_for_line("ack")
            time.sleep(rng.uniform(0.0, 0.12))
            lines += child.kill().splitlines()
        finally:
            child.stop()
        acked: dict[int, int] = {}
        begun: int | None = None
        for line in lines:
            word, *rest = line.split()
            if word == "begin":
                begun = int(rest[0])
            elif word == "ack":
                acked[int(rest[0])] = int(rest[1])
        unacked = begun if begun is not None and begun not in acked else None
        with turnlog.open(path) as log:
            present = check_store(log, tally, acked, unacked)
            if unacked is not None:
                retry = log.append(SESSION, batch(unacked))
                assert retry.duplicate == (unacked in present)
                if retry.duplicate:
                    tally.landed_unacked += 1
                else:
                    tally.absent_unacked += 1
                tally.positions[unacked] = retry.first_seq
                again = log.append(SESSION, batch(unacked))
                assert again.duplicate and again.first_seq == retry.first_seq
            tally.positions.update(acked)
            tally.acked += len(acked)
            check_store(log, tally, {}, None)
        next_batch = max([*tally.positions, next_batch - 1]) + 1
        tally.rounds += 1
    return tally


def test_sigkill_during_appends_loses_no_acknowledged_batch(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    tally = crash_rounds(tmp_path / "store", FAST_ROUNDS, seed, after_first_ack=1.0)
    assert tally.rounds == FAST_ROUNDS
    assert tally.acked > 0, f"no batch was acknowledged (seed {seed})"


@pytest.mark.slow
def test_sigkill_during_appends_loses_nothing_over_many_rounds(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    tally = crash_rounds(tmp_path / "store", SLOW_ROUNDS, seed, after_first_ack=0.5)
    print(
        f"\ncrash rounds: {tally.rounds}, acknowledged batches: {tally.acked}, "
        f"unacknowledged but landed: {tally.landed_unacked}, unacknowledged and absent: "
        f"{tally.absent_unacked}, seed {seed}"
    )
    assert tally.rounds == SLOW_ROUNDS
    assert tally.acked > SLOW_ROUNDS


LOCK_HOLDER = textwrap.dedent("""
    import sys, time
    import turnlog

    log = turnlog.open(sys.argv[1])

    def hold(txn):
        txn.put_event("never", 0, b"written by a process that is killed before commit")
        print("locked", flush=True)
        time.sleep(120)

    log.store.write(hold)
""")

WRITER = textwrap.dedent("""
    import sys
    import turnlog

    print("started", flush=True)
    log = turnlog.open(sys.argv[1])
    log.append("s", turnlog.events.UserMessageAdded(text="after the holder died"))
    print("done", flush=True)
""")


def test_killing_the_writer_frees_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with turnlog.open(path) as log:
        log.append("s", UserMessageAdded(text="before"))
    (tmp_path / "holder.py").write_text(LOCK_HOLDER)
    (tmp_path / "writer.py").write_text(WRITER)
    holder = Child(tmp_path / "holder.py", str(path))
    writer: Child | None = None
    try:
        holder.wait_for_line("locked")
        writer = Child(tmp_path / "writer.py", str(path))
        writer.wait_for_line("started")
        time.sleep(1.0)
        assert writer.proc.poll() is None, "the second writer did not wait for the lock"
        holder.kill()
        code, out = writer.finish()
        assert code == 0, writer.stderr()
        assert "done" in out
    finally:
        for child in (holder, writer):
            if child is not None:
                child.stop()
    with turnlog.open(path) as log:
        assert texts(log.read("s")) == ["before", "after the holder died"]
        assert log.head("never") is None
        assert log.verify().ok


def _run_in_fork(child: object) -> int:
    """Fork; in the child run ``child()`` (an int exit code) and ``_exit`` with it."""
    assert callable(child)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, 3.12+
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 99
        try:
            code = int(child())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_handle_used_after_fork_raises_forked_process_error(log: Log) -> None:
    log.append("s", UserMessageAdded(text="parent"))

    def child() -> int:
        try:
            log.append("s", UserMessageAdded(text="child"))
        except ForkedProcessError as exc:
            if "fork" not in str(exc):
                return 4
        except BaseException:
            return 3
        else:
            return 1
        try:
            log.read("s")
        except ForkedProcessError:
            return 0
        except BaseException:
            return 3
        return 2

    assert _run_in_fork(child) == 0
    assert texts(log.read("s")) == ["parent"]
    assert log.verify().ok


def test_forked_process_error_says_how_to_get_a_usable_handle(tmp_path: Path) -> None:
    path = tmp_path / "store"
    log = turnlog.open(path)
    try:
        log.append("s", UserMessageAdded(text="parent"))

        def child() -> int:
            try:
                log.head("s")
            except ForkedProcessError as exc:
                return 0 if "spawn" in str(exc) else 4
            return 1

        assert _run_in_fork(child) == 0
    finally:
        log.close()


APPENDER_ONCE = textwrap.dedent("""
    import sys
    import turnlog

    with turnlog.open(sys.argv[1]) as log:
        log.append("s", turnlog.events.UserMessageAdded(text="from another process"))
""")


def test_another_process_appends_while_this_one_holds_the_store_open(tmp_path: Path) -> None:
    path = tmp_path / "store"
    (tmp_path / "once.py").write_text(APPENDER_ONCE)
    with turnlog.open(path) as log:
        log.append("s", UserMessageAdded(text="here"))
        with log.snapshot() as snap:
            child = Child(tmp_path / "once.py", str(path))
            try:
                code, _ = child.finish()
            finally:
                child.stop()
            assert code == 0, child.stderr()
            head = snap.head("s")
            assert head is not None and head.seq == 0  # an open snapshot keeps its view
        assert texts(log.read("s")) == ["here", "from another process"]
        assert log.verify().ok
