"""Full reads on PostgreSQL beside eventsourcing's recorder, alternated round by round.

    python -m tests.bench.bench_postgres_read [EVENTS [ROUNDS]] [--against DIR]   # 2000 9

One durable server holds one session of EVENTS events of about 1 KiB (bench_log's
seeded events, appended in batches of 100) and the same records as one stream of
eventsourcing's ``PostgresAggregateRecorder`` (its state the event's canonical
bytes). Each round, in an order that alternates from round to round:

* turnlog (this tree) in a process of its own: the store opened, its connection
  made (an untimed head read), then three ``Log.read`` of the whole session, the
  median kept;
* with ``--against DIR``, the same with the ``turnlog`` package of another checkout
  (its ``kernel`` directory put first on the path, e.g. a ``git worktree`` of an
  older commit), on the same server and rows;
* eventsourcing: a recorder whose connection is made, then three
  ``select_events`` of the stream, each event decoded to a turnlog event, the
  median kept.

Prints each system's median rate and the median of the per-round paired ratios
(quartiles in brackets), with the load average before and after.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import msgspec
import turnlog

from tests import pgserver
from tests.bench.bench_log import BATCH, make_events, stored_records
from tests.bench.bench_postgres import es_append, es_recorder, tl_batched

READS = 3
_CHILD = """
import json, statistics, sys, time
import turnlog
url, session, reads = sys.argv[1], sys.argv[2], int(sys.argv[3])
with turnlog.open(url, readonly=True) as log:
    log.head(session)
    times = []
    for _ in range(reads):
        start = time.perf_counter()
        log.read(session)
        times.append(time.perf_counter() - start)
print(json.dumps({"module": turnlog.__file__, "seconds": statistics.median(times)}))
"""


def turnlog_read(url: str, session: str, path: str | None) -> tuple[float, str]:
    """The median of `READS` full reads in a process of its own (``path``: a directory
    whose ``turnlog`` is imported instead of this tree's)."""
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([path, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, url, session, str(READS)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout)
    return float(out["seconds"]), str(out["module"])


def es_read(recorder: object, stream: uuid.UUID) -> float:
    """The median of `READS` reads of the stream, each event decoded."""
    decode = msgspec.msgpack.Decoder(turnlog.events.Event).decode
    times = []
    for _ in range(READS):
        start = time.perf_counter()
        for stored in recorder.select_events(stream):  # type: ignore[attr-defined]
            decode(stored.state)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str]) -> None:
    against = None
    if "--against" in argv:
        at = argv.index("--against")
        against = argv[at + 1]
        argv = argv[:at] + argv[at + 2 :]
    count = int(argv[0]) if argv else 2000
    rounds = int(argv[1]) if len(argv) > 1 else 9
    other = None
    links = tempfile.TemporaryDirectory(prefix="turnlog-against-")
    if against is not None:
        # The other checkout's kernel directory, importable as turnlog.
        other = links.name
        (Path(other) / "turnlog").symlink_to(Path(against).resolve() / "kernel")
    server = pgserver.Server(durable=True)
    started = time.monotonic()
    try:
        drafts = make_events(7, count)
        records = stored_records(drafts)
        url = server.url(schema="read")
        tl_batched(url, drafts, "s")
        recorder = es_recorder(server)
        stream = uuid.UUID(es_append(server, records, BATCH)[1])
        es_read(recorder, stream)
        systems = ["turnlog"] + (["turnlog --against"] if other else []) + ["eventsourcing"]
        times: dict[str, list[float]] = {name: [] for name in systems}
        modules: dict[str, str] = {}
        load = os.getloadavg()[0]
        for turn in range(rounds):
            for name in systems if turn % 2 == 0 else reversed(systems):
                if name == "eventsourcing":
                    times[name].append(es_read(recorder, stream))
                    continue
                seconds, modules[name] = turnlog_read(
                    url, "s", other if name.endswith("--against") else None
                )
                times[name].append(seconds)
        recorder.datastore.close()
        print(
            f"full read of {count:,} events x {rounds} rounds; load average (1 min) "
            f"{load:.2f} before, {os.getloadavg()[0]:.2f} after; "
            f"{time.monotonic() - started:.0f} s"
        )
        for name in systems:
            line = f"{name:18s} {count / statistics.median(times[name]):9,.0f} events/s"
            if name != "eventsourcing":
                ratios = [p / t for p, t in zip(times["eventsourcing"], times[name], strict=True)]
                q = statistics.quantiles(ratios, n=4) if rounds > 1 else ratios * 3
                line += (
                    f"  x peer {statistics.median(ratios):.2f} (quartiles {q[0]:.2f}-{q[2]:.2f})"
                    f"  [{modules[name]}]"
                )
            print(line)
    finally:
        server.stop()
        links.cleanup()


if __name__ == "__main__":
    main(sys.argv[1:])
