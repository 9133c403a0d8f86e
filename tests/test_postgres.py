"""What only the PostgreSQL backend has: a schema version, a server that can fail.

The conformance suite and the stateful machines run on PostgreSQL too (the
``postgres`` param); this module adds the server's own cases, each on a real
server: the schema version, credentials kept out of every message, many
writers on one session and on many, a connection terminated mid-append, a
statement timeout, the server killed with SIGKILL and restarted, a full disk,
and followers woken by NOTIFY. A fault test starts a server of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pgserver
import psycopg
import pytest
import turnlog
from psycopg import sql
from support import LogFactory, dump, problem_of, texts
from turnlog import Draft
from turnlog import _postgres as postgres_module
from turnlog.adapters.providers import renderer_for
from turnlog.errors import (
    AppendConflictError,
    StoreError,
    StoreFormatError,
    StoreFullError,
    StoreUnavailableError,
)
from turnlog.events import UserMessageAdded
from turnlog.stores import PostgresStore, WriteTxn
from turnlog.tools.cli import main

pytestmark = pytest.mark.skipif(not pgserver.available(), reason=pgserver.SKIP_REASON)

SECRET = "s3cr3t-Pa55word"
T = TypeVar("T")


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogFactory]:
    """PostgreSQL logs, each in a schema of its own on the shared server."""
    factory = LogFactory("postgres", tmp_path)
    yield factory
    factory.close_all()


@pytest.fixture
def server() -> Iterator[pgserver.Server]:
    """A server of this test's own, which it may kill."""
    own = pgserver.Server()
    yield own
    own.stop()


def keyed(batch: int, size: int = 3) -> list[Draft]:
    """Batch number ``batch``: ``size`` messages with keys ``b{batch}-{i}``."""
    return [
        Draft(body=UserMessageAdded(text=f"batch {batch} message {i}"), key=f"b{batch}-{i}")
        for i in range(size)
    ]


def batches_stored(log: turnlog.Log, session: str) -> dict[int, int]:
    """``batch number -> events stored`` from the keys of a session's events."""
    counts: dict[int, int] = {}
    if log.head(session) is None:
        return counts
    for event in log.read(session):
        assert event.key is not None
        number = int(event.key[1:].split("-")[0])
        counts[number] = counts.get(number, 0) + 1
    return counts


def admin(server: pgserver.Server) -> psycopg.Connection[tuple[object, ...]]:
    """A superuser connection to ``server`` outside turnlog."""
    return psycopg.connect(server.url(), autocommit=True)


# -- schema -----------------------------------------------------------------------------
def test_first_open_creates_the_schema_with_its_version(logs: LogFactory) -> None:
    log = logs.open()
    assert isinstance(log.store, PostgresStore)
    with admin(pgserver.shared()) as conn:
        row = conn.execute(
            f"SELECT value FROM {log.store.schema}.meta WHERE key = 'schema'"
        ).fetchone()
    assert row == ("turnlog-postgres/1",)


@pytest.mark.parametrize("version", ["turnlog-postgres/2", "turnlog-postgres/0"])
def test_a_newer_or_older_schema_is_refused_like_an_lmdb_format(
    logs: LogFactory, version: str
) -> None:
    log = logs.open()
    log.append("s", UserMessageAdded(text="hi"))
    schema = log.store.schema  # type: ignore[attr-defined]
    with admin(pgserver.shared()) as conn:
        conn.execute(f"UPDATE {schema}.meta SET value = %s WHERE key = 'schema'", (version,))
    before = dump(log)
    with pytest.raises(StoreFormatError, match="this turnlog reads 'turnlog-postgres/1'"):
        turnlog.open(pgserver.shared().url(schema=schema))
    assert dump(log) == before  # nothing was upgraded or created


def test_a_missing_schema_opened_read_only_is_refused_and_not_created() -> None:
    url = pgserver.shared().url(schema="never_created")
    with pytest.raises(StoreError, match="no turnlog store"):
        turnlog.open(url, readonly=True)
    with admin(pgserver.shared()) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = 'never_created'"
        ).fetchone()
    assert found is None


@pytest.mark.parametrize(
    "verb",
    [
        ["sessions"],
        ["verify"],
        ["erase", "s", "--reason", "r"],
        ["pack", "s", "--record"],
        ["compact", "s"],
    ],
)
def test_a_missing_schema_on_the_command_line_exits_4_and_is_not_created(
    capsys: pytest.CaptureFixture[str], verb: list[str]
) -> None:
    """As a missing LMDB store: exit 4 with the command line's hint (not the library's
    create=True), and a verb that appends does not create the tables."""
    url = pgserver.shared().url(schema="cli_never_created")
    assert main(["--store", url, *verb]) == 4
    err = capsys.readouterr().err
    assert "no turnlog store" in err and "turnlog demo" in err and "create=" not in err
    with admin(pgserver.shared()) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = 'cli_never_created'"
        ).fetchone()
    assert found is None


def test_a_bad_schema_name_or_pool_size_is_an_argument_error() -> None:
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="schema"):
        turnlog.open(pgserver.shared().url(schema="Bad-Name"))
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="pool_size"):
        turnlog.open(pgserver.shared().url(schema="ok", pool_size="many"))


# -- credentials --------------------------------------------------------------------------
def test_the_password_appears_in_no_error_repr_log_or_cli_output(
    logs: LogFactory, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    shared = pgserver.shared()
    # Unreachable: a port nothing listens on.
    dead = f"postgresql://postgres:{SECRET}@127.0.0.1:1/postgres?connect_timeout=2"
    with pytest.raises(StoreUnavailableError) as caught:
        PostgresStore(dead, pool_timeout=2)
    assert SECRET not in str(caught.value)
    assert caught.value.__cause__ is None or SECRET not in str(caught.value.__cause__)
    # Reachable (the test server trusts local users, so any password is accepted).
    url = (
        f"postgresql://postgres:{SECRET}@/postgres?host={shared.root}&port={shared.port}"
        "&schema=secret_test"
    )
    log = turnlog.open(url)
    try:
        log.append("s", UserMessageAdded(text="hi"))
        assert SECRET not in repr(log) and SECRET not in log.store.location
        assert SECRET not in repr(log.store)
        for argv in (
            ["--store", url, "sessions", "--json"],
            ["--store", url, "verify", "--json"],
            ["--store", url, "show", "s", "0", "--json"],
        ):
            assert main(argv) == 0
            out, err = capsys.readouterr()
            assert SECRET not in out + err
            json.loads(out)
        assert main(["--store", url.replace("secret_test", "nothing_here"), "sessions"]) != 0
        out, err = capsys.readouterr()
        assert SECRET not in out + err
    finally:
        log.close()
        with admin(shared) as conn:
            conn.execute("DROP SCHEMA secret_test CASCADE")
    assert SECRET not in caplog.text  # the pool's log records, if any, lack the password


def _no_secret_in_any_verb(
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> list[tuple[list[str], int]]:
    """Run every verb of the command on ``url`` (and on a copy of it); each one's
    stdout and stderr must lack `SECRET`. Returns the verbs with their exit codes."""
    shared = pgserver.shared()
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(
        json.dumps(
            {
                "type": "user",
                "sessionId": "imported",
                "uuid": "u1",
                "timestamp": "2025-01-01T00:00:00Z",
                "message": {"role": "user", "content": "hi"},
            }
        )
        + "\n"
    )
    lmdb = str(tmp_path / "copy")
    demo = [["demo"], ["demo", "--json"]]
    ran: list[tuple[list[str], int]] = []

    def run(argv: list[str]) -> int:
        code = main(argv)
        out, err = capsys.readouterr()
        assert SECRET not in out + err, (argv, out + err)
        ran.append((argv, code))
        return code

    for argv in demo:
        assert run(["--store", url, *argv]) == 0
    with turnlog.open(url.replace(SECRET, "x")) as log, log.store.read() as txn:
        digest = next(txn.blobs())[0]
        requests = [e.seq for e in log.read("demo") if e.kind == "request"]
    verbs = [
        ["sessions"],
        ["sessions", "--json"],
        ["log", "demo"],
        ["log", "demo", "--json"],
        ["show", "demo", "-1"],
        ["show", "demo", "-1", "--json"],
        ["verify"],
        ["verify", "--json"],
        ["verify", "demo", "--progress"],
        ["checkpoint", "demo"],
        ["export", "demo", "--output", str(tmp_path / "out.jsonl")],
        ["blob", digest[:12]],
        ["pack", "demo"],
        ["explain", "demo", str(requests[-1])],
        ["replay", "demo"],
        ["replay", "demo", "--json"],
        ["diff", "demo", str(requests[-2]), str(requests[-1])],
        ["compact", "demo"],
        ["compact", "demo", "--json"],
        ["memories", "demo"],
        ["recall", "demo", "test"],
        ["import", str(transcript)],
        ["import", str(transcript), "--json"],
        ["log", "no-such-session"],
        ["show", "demo", "100000"],
    ]
    for argv in verbs:
        run(["--store", url, *argv])
    run(["copy", url, lmdb])
    run(["copy", "--json", lmdb, url.replace("schema=", "schema=c")])
    run(["copy", lmdb, url.replace("schema=", "schema=c")])  # refused: the target has them
    # Unreachable, no such database, a read verb on a schema without tables.
    dead = (
        url.replace(f"host={shared.root}", "host=127.0.0.1").replace(
            f"port={shared.port}", "port=1"
        )
        + "&pool_timeout=1"
    )
    for bad, code in (
        (dead, 3),
        (url.replace("/postgres?", "/no_such_db?"), 3),
        (url.replace("schema=", "schema=missing"), 4),  # no store: as a missing directory
    ):
        assert run(["--store", bad, "sessions"]) == code
        assert run(["--store", bad, "log", "s", "--json"]) == code
    assert run(["copy", dead, lmdb + "2"]) == 3
    assert run(["copy", lmdb, dead]) == 3
    return ran


@pytest.mark.parametrize("where", ["user info", "query"])
def test_no_verb_prints_the_password_of_a_store_url(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test server trusts local users: any password is accepted, and none may be
    shown, in human output, --json, hints (the demo's "try next") or errors."""
    shared = pgserver.shared()
    schema = "every_verb_" + where.replace(" ", "_")
    url = (
        f"postgresql://postgres:{SECRET}@/postgres?host={shared.root}&port={shared.port}"
        f"&schema={schema}"
        if where == "user info"
        else f"postgresql://postgres@/postgres?host={shared.root}&password={SECRET}"
        f"&port={shared.port}&schema={schema}"
    )
    monkeypatch.setenv("TURNLOG_STORE", url)  # also where a message could find it
    try:
        ran = _no_secret_in_any_verb(url, tmp_path, capsys)
        assert len({argv[2] if argv[0] == "--store" else argv[0] for argv, _ in ran}) == 17
        hint = main(["--store", url, "demo"])
        out = capsys.readouterr().out
        assert hint == 0 and out.count("turnlog --store 'postgresql://postgres@/postgres?") == 5
    finally:
        with admin(shared) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS c{schema} CASCADE")


@pytest.mark.parametrize(
    "location",
    [
        "postgresql://agent:SECRET@db.internal:5432/agents",
        "postgres://agent:SEC@RET@db/agents?sslmode=require",
        "postgresql://agent:SEC?RET@db/agents",
        "postgresql://:SECRET@db/agents",
        "postgresql://agent@/agents?host=/run/pg&password=SECRET&schema=x",
        "postgresql://agent@db/agents?sslpassword=SECRET&PASSWORD=SECRET",
        "host=db user=agent password=SECRET dbname=agents",
        "host=db password = 'SE CRET' dbname=agents user=agent",
    ],
)
def test_hide_credentials_leaves_no_password_and_keeps_the_rest(location: str) -> None:
    hidden = turnlog.stores.hide_credentials(location)
    assert "SEC" not in hidden and "RET" not in hidden
    assert "agents" in hidden and "agent" in hidden
    assert turnlog.stores.hide_credentials(hidden) == hidden
    assert turnlog.stores.hide_credentials("/srv/turnlog/store") == "/srv/turnlog/store"


# -- connection errors ----------------------------------------------------------------------
@pytest.mark.parametrize("wrong", ["database", "role"])
def test_a_wrong_database_or_role_fails_at_once_with_the_servers_reason(wrong: str) -> None:
    """A refusal for good is not waited on (pool_timeout is an hour here: the old
    code waited it out) and names the server's reason, not reachability."""
    shared = pgserver.shared()
    url = shared.url("no_such_db" if wrong == "database" else "postgres", pool_timeout="5")
    if wrong == "role":
        url = url.replace("postgres@", "no_such_role@")
    with pytest.raises(StoreError) as caught:
        turnlog.open(url)
    message = str(caught.value)
    assert not isinstance(caught.value, StoreUnavailableError)
    assert f'"no_such_{"db" if wrong == "database" else "role"}" does not exist' in message
    assert "retrying will not help" in message and "\n" not in message


def test_a_wrong_password_fails_at_once_with_the_servers_reason(server: pgserver.Server) -> None:
    with admin(server) as conn:
        conn.execute("CREATE ROLE agent LOGIN PASSWORD 'right-password'")
        conn.execute("GRANT CREATE ON DATABASE postgres TO agent")
    (server.data / "pg_hba.conf").write_text(
        "local all postgres trust\nlocal all all scram-sha-256\n"
    )
    with admin(server) as conn:
        conn.execute("SELECT pg_reload_conf()")
    base = server.url(pool_timeout="5")
    good = base.replace("postgres@", "agent:right-password@")
    with turnlog.open(good) as log:
        log.append("s", UserMessageAdded(text="hi"))
    with pytest.raises(StoreError) as caught:
        turnlog.open(base.replace("postgres@", f"agent:{SECRET}@"))
    assert not isinstance(caught.value, StoreUnavailableError)
    assert 'password authentication failed for user "agent"' in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_pool_with_every_connection_busy_says_so_rather_than_blaming_the_server(
    logs: LogFactory,
) -> None:
    log = logs.open()
    log.append("s", UserMessageAdded(text="hi"))
    schema = log.store.schema  # type: ignore[attr-defined]
    busy = turnlog.open(pgserver.shared().url(schema=schema, pool_size="1", pool_timeout="1"))
    try:
        # The snapshot holds the pool's one connection.
        with busy.snapshot(), pytest.raises(StoreUnavailableError) as caught:
            busy.append("s", UserMessageAdded(text="more"))
        message = str(caught.value)
        assert "every connection to" in message and "raise pool_size" in message
        assert "reachable" not in message and "\n" not in message
        assert busy.append("s", UserMessageAdded(text="more")).first_seq == 1
    finally:
        busy.close()


def _stderr_of(code: str, url: str) -> str:
    """The stderr of a fresh interpreter running ``code`` with ``URL`` set."""
    env = {**os.environ, "URL": url}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.stdout == "" or "turnlog" not in code, done.stdout
    return done.stderr


@pytest.mark.parametrize("case", ["unreachable", "no database"])
def test_a_connection_error_is_one_line_on_the_cli_and_nothing_for_a_library_user(
    case: str,
) -> None:
    """No psycopg_pool log records and no libpq continuation lines reach stderr."""
    shared = pgserver.shared()
    url = (
        f"postgresql://agent:{SECRET}@127.0.0.1:1/db?pool_timeout=2"
        if case == "unreachable"
        else shared.url("no_such_db", pool_timeout="2")
    )
    cli = _stderr_of(
        "import os, sys; from turnlog.tools.cli import main; "
        "sys.exit(main(['--store', os.environ['URL'], 'sessions']))",
        url,
    )
    assert cli.count("\n") == 1 and cli.startswith("turnlog: error: cannot open the store"), cli
    assert SECRET not in cli
    library = _stderr_of(
        "import os, turnlog\n"
        "try:\n    turnlog.open(os.environ['URL'])\n"
        "except turnlog.errors.StoreError as exc:\n"
        "    assert '\\n' not in str(exc)\n"
        "else:\n    raise SystemExit('opened')",
        url,
    )
    assert library == ""


# -- many writers --------------------------------------------------------------------------
def test_writers_on_one_session_never_lose_or_duplicate_an_event(logs: LogFactory) -> None:
    log = logs.open()
    url = pgserver.shared().url(schema=log.store.schema)  # type: ignore[attr-defined]
    writers, batches = 6, 15
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        own = turnlog.open(url)  # a store (and pool) per writer, as separate hosts would
        try:
            for n in range(batches):
                number = worker * 1000 + n
                own.append("shared", keyed(number, 2))
                # a retry after an unknown outcome: applied once
                again = own.append("shared", keyed(number, 2))
                assert again.duplicate
        except BaseException as exc:
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = batches_stored(log, "shared")
    assert counts == {w * 1000 + n: 2 for w in range(writers) for n in range(batches)}
    assert log.verify().ok


def test_expected_seq_races_are_decided_by_the_database(logs: LogFactory) -> None:
    log = logs.open()
    url = pgserver.shared().url(schema=log.store.schema)  # type: ignore[attr-defined]
    wins: list[int] = []
    conflicts: list[AppendConflictError] = []
    barrier = threading.Barrier(8)

    def race(worker: int) -> None:
        own = turnlog.open(url)
        try:
            barrier.wait()
            own.append("new", UserMessageAdded(text=str(worker)), expected_seq=-1)
            wins.append(worker)
        except AppendConflictError as exc:
            conflicts.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=race, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(conflicts) == 7
    assert all((c.expected, c.actual) == (-1, 0) for c in conflicts)
    assert texts(log.read("new")) == [str(wins[0])]


class _RacedStore(PostgresStore):
    """A store whose next write finds the session new, and then, before its commit,
    another writer's first event in it: the commit's pipeline fails on the primary key
    and the write runs again (the race of a session's first writers, made certain)."""

    rival: turnlog.Log | None = None

    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        rival, self.rival = self.rival, None

        def raced(txn: WriteTxn) -> T:
            if rival is not None and txn.head("raced") is None:
                rival.append("raced", UserMessageAdded(text="first"))
            return fn(txn)

        return super().write(raced)


def test_a_lost_first_writer_race_leaves_no_prepared_statement_missing(logs: LogFactory) -> None:
    # psycopg prepares a statement at its sixth execution on a connection. When that
    # execution is queued behind the insert that loses the race, the server skips it;
    # rolled back with a ROLLBACK statement, psycopg's cache still named it prepared and
    # the retry failed with 'prepared statement "_pg3_N" does not exist'. The race is
    # run after 0 to 7 appends on a one-connection pool, so that it meets the sixth
    # execution of each statement of an append.
    rival = logs.open()
    schema = rival.store.schema  # type: ignore[attr-defined]
    for appends in range(8):
        log = turnlog.Log(_RacedStore(pgserver.shared().url(schema=schema), pool_size=1))
        try:
            log.head("nothing")  # a read, which ends with a ROLLBACK, as an agent's do
            for i in range(appends):
                log.append(f"warm-{appends}-{i}", UserMessageAdded(text="x"))
            cast(_RacedStore, log.store).rival = rival
            log.append("raced", UserMessageAdded(text="second"))
            log.append("raced", UserMessageAdded(text="third"))
        finally:
            log.close()
        assert texts(rival.read("raced")) == ["first", "second", "third"], appends
        with psycopg.connect(pgserver.shared().url(), autocommit=True) as conn:
            for table in ("events", "heads"):
                conn.execute(
                    sql.SQL("DELETE FROM {}.{} WHERE session = 'raced'").format(
                        sql.Identifier(schema), sql.Identifier(table)
                    )
                )


def test_writer_processes_on_many_hosts_share_one_log(logs: LogFactory, tmp_path: Path) -> None:
    log = logs.open()
    url = pgserver.shared().url(schema=log.store.schema)  # type: ignore[attr-defined]
    script = (
        "import sys, turnlog\n"
        "url, worker = sys.argv[1], int(sys.argv[2])\n"
        "log = turnlog.open(url)\n"
        "for n in range(20):\n"
        "    drafts = [turnlog.Draft(body=turnlog.events.UserMessageAdded(text=str(i)),"
        " key=f'b{worker * 1000 + n}-{i}') for i in range(3)]\n"
        "    log.append('shared', drafts)\n"
        "    log.append(f'own{worker}', drafts)\n"
        "log.close()\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, url, str(w)]) for w in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    expected = {w * 1000 + n: 3 for w in range(4) for n in range(20)}
    assert batches_stored(log, "shared") == expected
    for w in range(4):
        assert batches_stored(log, f"own{w}") == {w * 1000 + n: 3 for n in range(20)}
    assert log.verify().ok


# -- one round trip ----------------------------------------------------------------------------
def reads_of(log: turnlog.Log, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queries a write of ``log`` sends before its commit, recorded as they go."""
    from turnlog import _postgres

    seen: list[str] = []
    rows = _postgres._PostgresWrite._rows

    def spy(
        self: _postgres._PostgresWrite,
        query: str,
        params: tuple[object, ...] = (),
    ) -> list[tuple[object, ...]]:
        seen.append(query)
        return rows(self, query, params)

    monkeypatch.setattr(_postgres._PostgresWrite, "_rows", spy)
    return seen


def test_a_keyed_append_after_a_write_of_the_session_reads_nothing_before_its_commit(
    logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = logs.open()
    reads = reads_of(log, monkeypatch)
    log.append("s", keyed(0, 1))
    assert reads == ["head_lock"]  # a session it has not written: its head is read
    reads.clear()
    for n in range(1, 4):
        assert log.append("s", keyed(n, 1)).first_seq == n
    assert reads == []  # the head it left and the keys, checked by the commit's statement
    assert log.verify().ok


def statements_of(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The statements each round trip of ``store``'s connections sends, by name (the
    store's query names; ``BEGIN``, ``COMMIT``, ``notify``), recorded as they go."""
    from turnlog import _postgres

    names = {bytes(text): name for name, text in store._q.items()}
    names[_postgres._NOTIFY] = names[_postgres._NOTIFY_ONE] = "notify"
    trips: list[list[str]] = []
    execute = psycopg.Connection.execute
    pipeline = psycopg.Connection.pipeline
    queue = _postgres._queue

    def spy_execute(self: psycopg.Connection[object], query: Any, *a: Any, **k: Any) -> object:
        name = names.get(query if isinstance(query, bytes) else b"")
        if self._pipeline is None:
            trips.append([])
        trips[-1].append(name or (query.decode() if isinstance(query, bytes) else str(query)))
        return execute(self, query, *a, **k)

    command = _postgres._command

    def spy_queue(conn: psycopg.Connection[Any], query: bytes, *a: Any, **k: Any) -> Any:
        trips[-1].append(names.get(query) or query.decode())
        return queue(conn, query, *a, **k)

    def spy_command(conn: psycopg.Connection[Any], query: bytes) -> Any:
        trips[-1].append(query.decode())
        return command(conn, query)

    @contextlib.contextmanager
    def spy_pipeline(self: psycopg.Connection[object]) -> Iterator[object]:
        if self._pipeline is None:
            trips.append([])
        with pipeline(self) as p:
            yield p

    exchange = _postgres._exchange

    def spy_exchange(conn: psycopg.Connection[Any], steps: Any, answers: Any) -> None:
        trips.append([name for name, _ in steps if name not in ("flush", "sync")])
        exchange(conn, steps, answers)

    monkeypatch.setattr(psycopg.Connection, "execute", spy_execute)
    monkeypatch.setattr(psycopg.Connection, "pipeline", spy_pipeline)
    monkeypatch.setattr(_postgres, "_queue", spy_queue)
    monkeypatch.setattr(_postgres, "_command", spy_command)
    monkeypatch.setattr(_postgres, "_exchange", spy_exchange)
    return trips


def test_a_one_event_append_is_one_round_trip_of_one_statement_and_locks_nothing_else(
    logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One statement: the head assumed is moved by the part that checks it (its row
    lock is the update's own: the row's new version carries no lock), the event and
    the key are inserted by the others (the key assumed new is checked by idem's
    primary key), from plain values for one event (arrays for more). One event: the
    statement alone in an implicit transaction on libpq's pipeline, prepared on the
    connection's first use, and the notification's statement in one of its own;
    more: between ``BEGIN`` and ``COMMIT``, the notification in a transaction begun
    by the append's COMMIT AND CHAIN."""
    log = logs.open()
    store = cast(PostgresStore, log.store)
    trips = statements_of(store, monkeypatch)
    log.append("s", keyed(0, 1))
    assert trips == [
        ["BEGIN", "head_lock"],  # a session it has not written: its head is read
        ["put_events", "put_idem", "insert_head", "COMMIT AND CHAIN", "notify", "COMMIT"],
    ]
    trips.clear()
    assert log.append("s", keyed(1, 1)).first_seq == 1
    assert trips == [["prepare append_one_keyed", "append_one_keyed", "prepare notify", "notify"]]
    for n in range(2, 4):
        trips.clear()
        assert log.append("s", keyed(n, 1)).first_seq == n
        assert trips == [["append_one_keyed", "notify"]]
    trips.clear()
    assert log.append("s", UserMessageAdded(text="no key")).first_seq == 4
    assert trips == [["prepare append_one", "append_one", "notify"]]
    trips.clear()
    assert log.append("s", keyed(4, 2)).first_seq == 5
    assert trips == [["BEGIN", "append_keyed", "COMMIT AND CHAIN", "notify", "COMMIT"]]
    trips.clear()
    pair = [UserMessageAdded(text="a"), UserMessageAdded(text="b")]
    assert log.append("s", pair).first_seq == 7
    assert trips == [["BEGIN", "append", "COMMIT AND CHAIN", "notify", "COMMIT"]]
    with admin(pgserver.shared()) as conn:
        row = conn.execute(
            sql.SQL("SELECT xmax::text, seq FROM {}.heads WHERE session = 's'").format(
                sql.Identifier(store.schema)
            )
        ).fetchone()
    assert row == ("0", 8)
    assert log.verify().ok
    assert [(e.seq, e.key) for e in log.read("s")][3:6] == [(3, "b3-0"), (4, None), (5, "b4-0")]


def test_an_appends_statements_leave_in_one_write_and_their_answers_come_back_at_once(
    logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's statements are queued in psycopg's pipeline and sent at its end, which
    then reads every answer: one exchange with the server. (One event: its steps all
    go to libpq before any answer is read, see the test above.)"""
    from psycopg import _pipeline_base

    log = logs.open()
    log.append("s", keyed(0, 2))
    exchanges: list[int] = []
    communicate = _pipeline_base.BasePipeline._communicate_gen

    def spy(self: Any) -> Any:
        exchanges.append(len(self.command_queue))
        return (yield from communicate(self))

    monkeypatch.setattr(_pipeline_base.BasePipeline, "_communicate_gen", spy)
    for n in range(1, 4):
        exchanges.clear()
        assert log.append("s", keyed(n, 2)).first_seq == 2 * n
        # BEGIN, the append (with its preparation the first time), the flush request,
        # COMMIT AND CHAIN, the notification, COMMIT and the sync: all in one.
        assert len(exchanges) == 1 and exchanges[0] >= 7, exchanges
    assert batches_stored(log, "s") == {n: 2 for n in range(4)}


def test_a_refused_first_one_event_append_leaves_its_connections_statements_known(
    logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first one-event append on a connection prepares the append's statement and
    the notification's, and is refused (another store moved the head). The server runs
    the notification's part all the same: its preparation is recorded, so the next
    append does not prepare it again (refused as a duplicate, which would drop that
    append's notification) and a follower is woken."""
    monkeypatch.setattr("turnlog._postgres._RECHECK", 3600.0)  # notifications only
    log = logs.open()
    store = cast(PostgresStore, log.store)
    url = pgserver.shared().url(schema=store.schema)
    log.append("s", keyed(0, 1))
    with turnlog.open(url) as rival:
        rival.append("s", keyed(1, 1))
    trips = statements_of(store, monkeypatch)
    assert log.append("s", keyed(2, 1)).first_seq == 2  # refused, then run with reads
    assert trips[0] == [
        "prepare append_one_keyed",
        "append_one_keyed",
        "prepare notify",
        "notify",
    ], trips
    monkeypatch.undo()
    monkeypatch.setattr("turnlog._postgres._RECHECK", 3600.0)
    with turnlog.open(url) as follower:
        woken: list[int] = []
        thread = threading.Thread(
            target=lambda: woken.extend(
                e.seq for e in follower.follow("s", after_seq=2, timeout=10, limit=1)
            )
        )
        thread.start()
        until_followed(pgserver.shared())
        trips = statements_of(store, monkeypatch)
        started = time.monotonic()
        assert log.append("s", keyed(3, 1)).first_seq == 3
        thread.join(timeout=10)
        assert woken == [3] and time.monotonic() - started < 5, woken
        assert [trip for trip in trips if "notify" in trip] == [["append_one_keyed", "notify"]]


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
def test_a_store_talks_utf8_whatever_client_encoding_the_url_asks(
    monkeypatch: pytest.MonkeyPatch, encoding: str
) -> None:
    """A URL (or PGCLIENTENCODING) asking for another client encoding: the store still
    opens (with SQL_ASCII psycopg returned bytes, and the open said the UTF8 database
    had encoding b'UTF8'), and a session and a key outside that encoding go on the
    wire, one-event appends included, and read back the same."""
    url = pgserver.shared().url(schema=f"enc{os.getpid()}", client_encoding=encoding)
    with turnlog.open(url) as log:
        store = cast(PostgresStore, log.store)
        log.append("séance 🙂", Draft(body=UserMessageAdded(text="a"), key="clé-0"))
        trips = statements_of(store, monkeypatch)
        appended = log.append("séance 🙂", Draft(body=UserMessageAdded(text="b"), key="clé-1"))
        assert appended.first_seq == 1
        assert trips == [
            ["prepare append_one_keyed", "append_one_keyed", "prepare notify", "notify"]
        ]
        assert [(e.seq, e.key) for e in log.read("séance 🙂")] == [(0, "clé-0"), (1, "clé-1")]
        assert log.append(
            "séance 🙂", Draft(body=UserMessageAdded(text="b"), key="clé-1")
        ).duplicate
        with admin(pgserver.shared()) as conn:
            conn.execute(f"DROP SCHEMA enc{os.getpid()} CASCADE")


def test_an_append_whose_connection_lost_its_prepared_statements_prepares_them_again(
    logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg's ``rollback()`` deallocates every statement of a connection: the next
    one-event append finds its statement gone (the server refuses the execution:
    nothing ran) and sends it again with its preparation; the notification's statement,
    gone too, is prepared again and still wakes a follower. A store that forgot what
    a connection prepared finds the statement there and sends the append again."""
    monkeypatch.setattr("turnlog._postgres._RECHECK", 3600.0)  # notifications only
    log = logs.open()
    store = cast(PostgresStore, log.store)
    log.append("s", keyed(0, 1))
    log.append("s", keyed(1, 1))  # prepares the statements on the write connection
    with store._pool.connection() as conn:
        conn.execute("DEALLOCATE ALL")
    follower = turnlog.open(pgserver.shared().url(schema=store.schema))
    woken: list[int] = []

    def follow() -> None:
        woken.extend(e.seq for e in follower.follow("s", after_seq=1, timeout=10, limit=1))

    thread = threading.Thread(target=follow)
    thread.start()
    until_followed(pgserver.shared())
    trips = statements_of(store, monkeypatch)
    assert log.append("s", keyed(2, 1)).first_seq == 2
    trips[:] = [trip for trip in trips if "notify" in trip]  # (not the follower's reads)
    assert trips == [
        ["append_one_keyed", "notify"],  # gone: the server refuses the execution
        ["prepare append_one_keyed", "append_one_keyed", "prepare notify", "notify"],
    ], trips
    thread.join(timeout=10)
    assert woken[:1] == [2]
    trips.clear()
    store._wired.clear()  # forgotten: the preparation is refused, the statement is there
    assert log.append("s", keyed(3, 1)).first_seq == 3
    trips[:] = [trip for trip in trips if "notify" in trip]
    assert trips == [
        ["prepare append_one_keyed", "append_one_keyed", "prepare notify", "notify"],
        ["append_one_keyed", "notify"],
    ], trips
    assert next(iter(follower.follow("s", after_seq=2, timeout=10))).seq == 3
    trips.clear()
    assert log.append("s", keyed(4, 1)).first_seq == 4
    trips[:] = [trip for trip in trips if "notify" in trip]
    assert trips == [["append_one_keyed", "notify"]]
    assert batches_stored(log, "s") == {n: 1 for n in range(5)}
    assert log.verify().ok
    follower.close()


class _OvertakenStore(PostgresStore):
    """A store whose next write is overtaken: after ``fn`` is given the head this
    store assumed, and before its commit, ``rival`` appends to the session."""

    rival: tuple[turnlog.Log, list[Draft]] | None = None
    attempts = 0

    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        rival, self.rival = self.rival, None

        def overtaken(txn: WriteTxn) -> T:
            self.attempts += 1
            if rival is not None and self.attempts == 1:
                txn.head("s")  # assumed: nothing is read
                rival[0].append("s", rival[1])
            return fn(txn)

        return super().write(overtaken)


@pytest.mark.parametrize("expected", [None, 2])
def test_an_append_overtaken_between_its_assumed_head_and_its_commit_is_refused_and_retried(
    logs: LogFactory, expected: int | None
) -> None:
    first = logs.open()
    url = pgserver.shared().url(schema=first.store.schema)  # type: ignore[attr-defined]
    log = turnlog.Log(_OvertakenStore(url))
    try:
        log.append("s", keyed(0))
        store = cast(_OvertakenStore, log.store)
        store.rival, store.attempts = (first, keyed(1)), 0
        if expected is None:
            done = log.append("s", keyed(2))
            assert (done.first_seq, done.duplicate) == (6, False)
        else:  # decided by the database: the head assumed (2) is no longer the head
            with pytest.raises(AppendConflictError) as caught:
                log.append("s", keyed(2), expected_seq=expected)
            assert (caught.value.expected, caught.value.actual) == (2, 5)
        assert store.attempts == 2  # refused by the server once, then run with reads
        stored = {0: 3, 1: 3, 2: 3} if expected is None else {0: 3, 1: 3}
        assert batches_stored(first, "s") == stored
        again = log.append("s", keyed(2))  # a retry (applied once), or the batch at last
        assert (again.first_seq, again.duplicate) == (6, expected is None)
        assert first.verify().ok
    finally:
        log.close()


def test_an_append_waiting_for_a_writer_that_holds_the_head_sees_its_commit_and_lands_after(
    logs: LogFactory,
) -> None:
    """A writer that read the head holds its row lock while it decides; an append that
    assumed the old head waits in its update for that lock, then finds the head moved
    (the update looks at the row the other writer left), refuses and runs again with
    reads: nothing lost, nothing twice."""
    log = logs.open()
    url = pgserver.shared().url(schema=log.store.schema)  # type: ignore[attr-defined]
    log.append("s", keyed(0))
    holding, release = threading.Event(), threading.Event()
    reader = PostgresStore(url)
    reader._assume = False  # reads (and locks) the head first
    slow = turnlog.Log(reader)

    def slow_append() -> None:
        original = reader.write

        def write(fn: Callable[[WriteTxn], T]) -> T:
            def held(txn: WriteTxn) -> T:
                txn.head("s")  # the row lock, taken in a round trip of its own
                holding.set()
                release.wait(30)
                return fn(txn)

            return original(held)

        reader.write = write  # type: ignore[method-assign]
        slow.append("s", keyed(1))

    other = threading.Thread(target=slow_append)
    other.start()
    try:
        assert holding.wait(30)
        outcome: list[BaseException | turnlog.log.Appended] = []
        appender = threading.Thread(target=lambda: outcome.append(_try(log, keyed(2))))
        appender.start()
        with admin(pgserver.shared()) as conn:
            until_waiting(conn)
        release.set()
        other.join()
        appender.join()
        done = outcome[0]
        assert isinstance(done, turnlog.log.Appended), done
        assert (done.first_seq, done.duplicate) == (6, False)
        assert batches_stored(log, "s") == {0: 3, 1: 3, 2: 3}
        assert log.verify().ok
    finally:
        release.set()
        other.join()
        slow.close()


def test_a_head_moved_by_another_writer_is_found_by_the_server_and_the_append_lands_after_it(
    logs: LogFactory,
) -> None:
    first = logs.open()
    url = pgserver.shared().url(schema=first.store.schema)  # type: ignore[attr-defined]
    first.append("s", keyed(0))
    with turnlog.open(url) as other:
        other.append("s", keyed(1))
        # first assumes the head it left (seq 2): the server refuses the assumption.
        with pytest.raises(AppendConflictError) as caught:
            first.append("s", keyed(2), expected_seq=2)
        assert (caught.value.expected, caught.value.actual) == (2, 5)
        assert first.append("s", keyed(2)).first_seq == 6
        # A retry of the other writer's batch is one, whatever expected_seq says: first
        # assumes its keys new (its head is right), the server finds them stored.
        for expected in (None, 2):
            retry = first.append("s", keyed(1), expected_seq=expected)
            assert (retry.first_seq, retry.duplicate) == (3, True)
        other.append("s", keyed(3))  # other assumed seq 5: refused, then read
        assert first.append("s", keyed(4), expected_seq=11).first_seq == 12
    assert batches_stored(first, "s") == {n: 3 for n in range(5)}
    assert first.verify().ok


def test_retries_refused_by_the_servers_check_leave_no_missing_prepared_statement(
    logs: LogFactory,
) -> None:
    """Each retry of a stored key is refused by the statement that checks the keys
    assumed new, which skips the rest of its pipeline, past the uses after which
    psycopg prepares a statement: a statement taken as prepared whose preparation
    was skipped would fail the next append ("prepared statement does not exist")."""
    log = logs.open()
    log.append("s", keyed(0, 1))
    for n in range(1, 11):
        assert log.append("s", keyed(n - 1, 1)).duplicate
        assert log.append("s", keyed(n, 1)).first_seq == n
    assert log.verify().ok


def test_a_store_of_an_older_turnlog_gets_the_function_and_keeps_its_tables(
    logs: LogFactory,
) -> None:
    log = logs.open()
    log.append("s", keyed(0))
    schema = log.store.schema  # type: ignore[attr-defined]
    url = pgserver.shared().url(schema=schema)
    with admin(pgserver.shared()) as conn:  # as 0.2.0 left it: no function, no row
        conn.execute(f"DROP FUNCTION {schema}.refuse()")
        conn.execute(f"DELETE FROM {schema}.meta WHERE key = 'functions'")
    with turnlog.open(url, readonly=True) as reader:  # a reader creates nothing
        assert batches_stored(reader, "s") == {0: 3}
    with admin(pgserver.shared()) as conn:
        assert (
            conn.execute(f"SELECT value FROM {schema}.meta WHERE key = 'functions'").fetchone()
            is None
        )
    with turnlog.open(url) as writer:
        writer.append("s", keyed(1))
        other = turnlog.open(url)
        other.append("s", keyed(2))
        with pytest.raises(AppendConflictError):  # writer's assumed head is refused
            writer.append("s", keyed(3), expected_seq=5)
        other.close()
    with admin(pgserver.shared()) as conn:
        assert conn.execute(f"SELECT value FROM {schema}.meta WHERE key = 'schema'").fetchone() == (
            "turnlog-postgres/1",
        )
        assert conn.execute(
            f"SELECT value FROM {schema}.meta WHERE key = 'functions'"
        ).fetchone() == ("turnlog-postgres-functions/1",)
    assert batches_stored(log, "s") == {0: 3, 1: 3, 2: 3}


# -- faults ----------------------------------------------------------------------------------
def hold_head_lock(
    server: pgserver.Server,
    schema: str,
    session: str,
) -> psycopg.Connection[tuple[object, ...]]:
    """A connection holding the row lock on a session's head (an append then waits)."""
    conn = psycopg.connect(server.url())
    conn.execute(f"SELECT 1 FROM {schema}.heads WHERE session = %s FOR UPDATE", (session,))
    return conn


#: A backend of an append waiting for a session's head row lock (its statement reads
#: the head FOR UPDATE, or moves the head it assumed).
WAITING_FOR_HEAD = (
    "wait_event_type = 'Lock' "
    "AND (query LIKE '%.heads%FOR UPDATE%' OR query LIKE '%UPDATE %.heads SET%')"
)


def waiting_pid(
    conn: psycopg.Connection[tuple[object, ...]], where: str = WAITING_FOR_HEAD
) -> int | None:
    """The pid of a backend of ``pg_stat_activity`` matching ``where``, if any."""
    row = conn.execute(f"SELECT pid FROM pg_stat_activity WHERE {where}").fetchone()
    return int(row[0]) if row else None  # type: ignore[call-overload]


def until_waiting(
    conn: psycopg.Connection[tuple[object, ...]],
    where: str = WAITING_FOR_HEAD,
    never: str = "the append never waited for the row lock",
) -> int:
    """Wait (30 s at most: else fail saying ``never``) for a backend matching
    ``where``; its pid."""
    deadline = time.monotonic() + 30
    while (pid := waiting_pid(conn, where)) is None:
        assert time.monotonic() < deadline, never
        threading.Event().wait(0.01)
    return pid


@pytest.mark.parametrize("size", [1, 3])
def test_a_connection_terminated_mid_append_is_retried_on_a_fresh_one_and_applies_once(
    server: pgserver.Server, size: int
) -> None:
    log = turnlog.open(server.url(schema="faults"))
    try:
        log.append("s", keyed(0, size))
        blocker = hold_head_lock(server, "faults", "s")
        outcome: list[BaseException | turnlog.log.Appended] = []
        appender = threading.Thread(target=lambda: outcome.append(_try(log, keyed(1, size))))
        appender.start()
        with admin(server) as conn:
            # The append is inside its transaction, waiting for the lock: drop its
            # connection. Nothing was committed, so the store runs it again on another.
            pid = until_waiting(conn)
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            while waiting_pid(conn) in (None, pid):
                pass
        blocker.close()
        appender.join()
        done = outcome[0]
        assert isinstance(done, turnlog.log.Appended), done
        assert (done.first_seq, done.duplicate) == (size, False)
        assert log.append("s", keyed(1, size)).duplicate
        assert batches_stored(log, "s") == {0: size, 1: size}
        assert log.verify().ok
    finally:
        log.close()


@pytest.mark.parametrize("size", [1, 3])
def test_a_connection_terminated_at_every_attempt_is_a_clear_error_and_writes_nothing(
    server: pgserver.Server, size: int
) -> None:
    log = turnlog.open(server.url(schema="faults", pool_size="2"))
    try:
        log.append("s", keyed(0, size))
        before = dump_rows(server)
        blocker = hold_head_lock(server, "faults", "s")
        outcome: list[BaseException | turnlog.log.Appended] = []
        appender = threading.Thread(target=lambda: outcome.append(_try(log, keyed(1, size))))
        appender.start()
        with admin(server) as conn:
            while appender.is_alive():
                pid = waiting_pid(conn)
                if pid is not None:
                    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        appender.join()
        blocker.close()
        assert isinstance(outcome[0], StoreUnavailableError), outcome
        assert "nothing was written" in str(outcome[0])
        assert dump_rows(server) == before
        done = log.append("s", keyed(1, size))  # the caller's retry, with the same keys
        assert (done.first_seq, done.duplicate) == (size, False)
        assert batches_stored(log, "s") == {0: size, 1: size}
        assert log.verify().ok
    finally:
        log.close()


@pytest.mark.parametrize("size", [1, 3])
def test_a_backend_killed_before_answering_the_append_wrote_nothing_and_is_retried(
    server: pgserver.Server, size: int
) -> None:
    """The append's backend waits for the head's row lock and is killed (SIGKILL: no
    word to the client; the server restarts every backend). Its statement never
    answered, and the answer is sent before the commit: nothing was committed, so the
    store runs the append again on a new connection once the server is back."""
    log = turnlog.open(server.url(schema="faults"))
    try:
        log.append("s", keyed(0, size))
        log.append("s", keyed(1, size))  # (the one-event statement prepared)
        blocker = hold_head_lock(server, "faults", "s")
        outcome: list[BaseException | turnlog.log.Appended] = []
        appender = threading.Thread(target=lambda: outcome.append(_try(log, keyed(2, size))))
        appender.start()
        with admin(server) as conn:
            pid = until_waiting(conn)
        os.kill(pid, signal.SIGKILL)
        appender.join(timeout=60)
        with contextlib.suppress(psycopg.Error):
            blocker.close()
        done = outcome[0]
        assert isinstance(done, turnlog.log.Appended), done
        assert (done.first_seq, done.duplicate) == (2 * size, False)
        assert batches_stored(log, "s") == {0: size, 1: size, 2: size}
        assert log.verify().ok
    finally:
        log.close()


@pytest.mark.parametrize("size", [1, 3])
def test_a_connection_lost_while_its_commit_waits_says_the_batch_may_have_been_committed(
    server: pgserver.Server, size: int
) -> None:
    """The server answered the append's statement and committed locally, and waits for a
    synchronous standby that never answers when its backend is terminated. The
    append must not say that nothing was written: it may have been committed, and
    the retry with the same keys finds it stored."""
    log = turnlog.open(server.url(schema="faults", pool_size="1"))
    try:
        log.append("s", keyed(0, size))
        log.append("s", keyed(1, size))  # (the one-event statement prepared)
        with admin(server) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'never_there'")
            conn.execute("SELECT pg_reload_conf()")
        # An idle backend reloads its settings after the next statement it runs: a read
        # on the store's one connection, once the reload reached it.
        time.sleep(0.2)
        assert log.head("s") is not None
        outcome: list[BaseException | turnlog.log.Appended] = []
        appender = threading.Thread(target=lambda: outcome.append(_try(log, keyed(2, size))))
        appender.start()
        with admin(server) as conn:
            pid = until_waiting(
                conn, "wait_event = 'SyncRep'", "the append's commit never waited for the standby"
            )
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            appender.join(timeout=30)
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("SELECT pg_reload_conf()")
        assert isinstance(outcome[0], StoreUnavailableError), outcome
        assert "may or may not have been committed" in str(outcome[0])
        retry = log.append("s", keyed(2, size))
        assert (retry.first_seq, retry.duplicate) == (2 * size, True)
        assert batches_stored(log, "s") == {0: size, 1: size, 2: size}
        assert log.verify().ok
    finally:
        log.close()


@pytest.mark.parametrize("size", [1, 3])
def test_a_statement_timeout_is_a_clear_error_and_writes_nothing(
    server: pgserver.Server, size: int
) -> None:
    log = turnlog.open(server.url(schema="faults", options="-c%20statement_timeout%3D300"))
    try:
        log.append("s", keyed(0, size))
        before = dump_rows(server)
        blocker = hold_head_lock(server, "faults", "s")
        with pytest.raises(StoreUnavailableError, match="statement_timeout") as caught:
            log.append("s", keyed(1, size))
        assert "nothing was written" in str(caught.value)
        blocker.close()
        assert dump_rows(server) == before
        assert log.append("s", keyed(1, size)).first_seq == size
    finally:
        log.close()


@pytest.mark.parametrize("size", [1, 3])
def test_a_lock_timeout_before_the_commit_writes_nothing_and_says_so(
    server: pgserver.Server, size: int
) -> None:
    log = turnlog.open(server.url(schema="faults", options="-c%20lock_timeout%3D300"))
    try:
        log.append("s", keyed(0, size))
        before = dump_rows(server)
        blocker = hold_head_lock(server, "faults", "s")
        with pytest.raises(StoreUnavailableError, match="lock_timeout") as caught:
            log.append("s", keyed(1, size))
        assert "nothing was written" in str(caught.value)
        assert "may or may not" not in str(caught.value)
        blocker.close()
        assert dump_rows(server) == before
        assert log.append("s", keyed(1, size)).first_seq == size
    finally:
        log.close()


@pytest.mark.parametrize("size", [1, 3])
def test_the_notification_after_a_commit_never_fails_the_append_or_the_open(
    server: pgserver.Server, size: int
) -> None:
    """Another session holds PostgreSQL's database-wide notify lock: it committed a
    write and a NOTIFY and waits for a synchronous standby that never answers (as a
    slow fsync or a busy notify queue would hold it). Writers with lock_timeout
    (docs/deployment.md recommends one) must still open and append, and a follower
    still sees the batch."""
    with admin(server) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'never_there'")
        conn.execute("SELECT pg_reload_conf()")
    # This store's own commits wait for the local disk only.
    url = server.url(
        schema="n", options="-c%20synchronous_commit%3Dlocal%20-c%20lock_timeout%3D200"
    )
    early = turnlog.open(url)  # opened before the lock is held
    early.append("s", keyed(0, size))
    # Somebody follows (holds the followers' lock), so every write notifies.
    follower = admin(server)
    follower.execute(
        "SELECT pg_advisory_lock_shared(%s)", (postgres_module.follow_key("turnlog.n"),)
    )
    blocker = admin(server)

    def hold() -> None:
        with contextlib.suppress(psycopg.OperationalError):  # terminated at the end
            blocker.execute(
                "CREATE TABLE hold (x int); INSERT INTO hold VALUES (1); NOTIFY elsewhere"
            )

    held = threading.Thread(target=hold)
    held.start()
    try:
        with admin(server) as conn:
            for _ in range(500):  # until the blocker waits for its standby, lock held
                row = conn.execute(
                    "SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                    (blocker.info.backend_pid,),
                ).fetchone()
                if row == ("SyncRep",):
                    break
                threading.Event().wait(0.01)
            assert row == ("SyncRep",)
        results = [early.append("s", keyed(n, size)) for n in range(1, 4)]
        assert [r.first_seq for r in results] == [size, 2 * size, 3 * size]
        with turnlog.open(url) as late:  # opens (it failed 13 of 20 times)
            assert late.append("s", keyed(4, size)).first_seq == 4 * size
            followed = late.follow("s", after_seq=4 * size - 2, timeout=0.1)
            assert [e.seq for e in followed][:2] == [4 * size - 1, 4 * size]
        assert batches_stored(early, "s") == {n: size for n in range(5)}
    finally:
        with admin(server) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (blocker.info.backend_pid,))
        held.join()
        blocker.close()
        follower.close()
        early.close()


@pytest.mark.parametrize("size", [1, 4])
def test_the_server_killed_with_sigkill_keeps_every_acknowledged_batch(
    server: pgserver.Server, size: int
) -> None:
    url = server.url(schema="faults", pool_timeout="2")
    log = turnlog.open(url)
    acknowledged: list[int] = []
    failed: list[int] = []
    stop = threading.Event()

    def write() -> None:
        number = 0
        while not stop.is_set() and number < 5000:
            try:
                log.append("s", keyed(number, size))
                acknowledged.append(number)
            except StoreUnavailableError:
                failed.append(number)
                return
            number += 1

    writer = threading.Thread(target=write)
    writer.start()
    while len(acknowledged) < 50 and writer.is_alive():
        threading.Event().wait(0.01)
    server.kill()
    stop.set()
    writer.join()
    assert failed, "the writer should have met the dead server"
    with pytest.raises(StoreUnavailableError):
        log.append("s", keyed(99_999))
    server.start()
    # The same handle recovers: its pool replaces the dead connections.
    counts = batches_stored(log, "s")
    assert all(counts.get(n) == size for n in acknowledged)  # every acknowledged batch
    assert all(c == size for c in counts.values())  # and no half batch
    assert set(counts) <= {*acknowledged, *failed}
    # The batch whose outcome was unknown: retrying applies it exactly once.
    retry = log.append("s", keyed(failed[0], size))
    assert retry.duplicate == (failed[0] in counts)
    assert batches_stored(log, "s")[failed[0]] == size
    assert log.verify().ok
    log.close()


def test_a_full_disk_fails_the_append_cleanly(tmp_path: Path) -> None:
    # The server may write no file beyond 24 MB (ulimit -f): a table that would
    # grow past it fails as on a full disk (PostgreSQL reports a short write as
    # "disk full"). WAL segments are 16 MB, so the server itself still runs.
    server = pgserver.Server(file_limit=24 * 2**20 + 4096)
    log = turnlog.open(server.url(schema="faults"))
    try:
        written = 0
        with pytest.raises(StoreFullError, match="disk is full") as caught:
            for n in range(100):
                # incompressible payloads of 1 MB, as blobs
                log.append("s", UserMessageAdded(text=os.urandom(2**19).hex()))
                written = n + 1
        assert "nothing was written" in str(caught.value)
        assert 0 < written < 100
        head = log.head("s")
        assert head is not None and head.seq == written - 1
        report = log.verify()
        assert report.ok and report.blobs == written
    finally:
        log.close()
        server.stop()


def _try(log: turnlog.Log, batch: list[Draft]) -> BaseException | turnlog.log.Appended:
    try:
        return log.append("s", batch)
    except BaseException as exc:
        return exc


def dump_rows(server: pgserver.Server) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the ``faults`` schema."""
    out = {}
    with admin(server) as conn:
        for table in ("events", "heads", "idem", "blobs", "cache", "meta"):
            out[table] = conn.execute(f"SELECT * FROM faults.{table} ORDER BY 1, 2").fetchall()
    return out


# -- following --------------------------------------------------------------------------------
def test_a_follower_is_woken_by_a_writer_on_another_connection(
    logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without its once-a-second re-read of the head, only a notification can wake it.
    monkeypatch.setattr("turnlog._postgres._RECHECK", 3600.0)
    log = logs.open()
    url = pgserver.shared().url(schema=log.store.schema)  # type: ignore[attr-defined]
    log.append("s", UserMessageAdded(text="0"))
    seen: list[str] = []
    follower = threading.Thread(
        target=lambda: seen.extend(texts(log.follow("s", 0, timeout=3600, limit=3))), daemon=True
    )
    follower.start()
    other = turnlog.open(url)
    try:
        for i in (1, 2, 3):
            other.append("s", UserMessageAdded(text=str(i)))
    finally:
        other.close()
    follower.join(timeout=20)
    assert seen == ["1", "2", "3"]


def test_writers_notify_only_while_a_follower_listens(
    server: pgserver.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write sends its notification only while a follower holds the channel's lock:
    with nobody following, the transaction after the append's commit takes no xid
    (no commit record, nothing queued); once a follower listens, every write
    notifies, and it stops again when the follower leaves."""
    monkeypatch.setattr("turnlog._postgres._RECHECK", 3600.0)
    url = server.url(schema="quiet")
    log = turnlog.open(url)
    spy = admin(server)  # LISTENs without the lock: sees what is sent, follows nothing
    try:
        spy.execute('LISTEN "turnlog.quiet"')
        log.append("s", UserMessageAdded(text="0"))

        def heard() -> list[str]:
            return [n.payload for n in spy.notifies(timeout=0.2, stop_after=10)]

        def xids() -> int:
            with admin(server) as conn:
                row = conn.execute("SELECT txid_current()").fetchone()
                assert row is not None
                return int(str(row[0]))

        before = xids()
        for i in range(3):
            log.append("s", UserMessageAdded(text=f"quiet {i}"))
        # One xid for each append and one for the second txid_current(): none for a
        # notification.
        assert xids() - before == 3 + 1
        assert heard() == []
        seen: list[str] = []
        follower = threading.Thread(
            target=lambda: seen.extend(texts(log.follow("s", 3, timeout=60, limit=2))),
            daemon=True,
        )
        follower.start()
        while not listening(server)[1:] and follower.is_alive():
            threading.Event().wait(0.01)
        log.append("s", UserMessageAdded(text="a"))
        log.append("s", UserMessageAdded(text="b"))
        follower.join(timeout=20)
        assert seen == ["a", "b"]
        assert heard() == ["s", "s"]
        log.append("s", UserMessageAdded(text="after"))
        assert heard() == []
    finally:
        spy.close()
        log.close()


def test_a_follower_that_starts_while_a_writer_appends_misses_no_commit(
    server: pgserver.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that found nobody following sends nothing; a follower that starts
    meanwhile takes its lock after its LISTEN and reads the head only once it holds
    it, so every commit is either seen by that read or notified. The commit lands at
    moments spread over the follower's start; without the re-read each second, a
    commit neither seen nor notified would leave the wait to its timeout."""
    monkeypatch.setattr("turnlog._postgres._RECHECK", 3600.0)
    url = server.url(schema="race")
    writer_log = turnlog.open(url)
    follower_log = turnlog.open(url, readonly=True)
    try:
        writer_log.append("s", UserMessageAdded(text="first"))
        for round_ in range(30):
            head = writer_log.head("s")
            assert head is not None
            delay = (round_ % 10) * 0.005  # 0 to 45 ms: before, during, after LISTEN
            writer = threading.Timer(
                delay, lambda: writer_log.append("s", UserMessageAdded(text="x"))
            )
            writer.start()
            started = time.monotonic()
            # (at its timeout a wait reads the head once more: woken, but too late)
            woken = follower_log.store.wait("s", head.seq, 2.0)  # type: ignore[attr-defined]
            took = time.monotonic() - started
            writer.join()
            assert woken and took < 1.5, f"round {round_}: a commit {delay * 1000:.0f} ms in"
    finally:
        writer_log.close()
        follower_log.close()


def test_a_follower_reads_the_head_only_once_it_holds_the_followers_lock(
    server: pgserver.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that found nobody following holds the key until its notification's
    transaction ends, after its commit; a follower that starts meanwhile waits for the
    key and reads the head then. Here the key is held while a commit that notifies
    nobody lands: a follower that read the head before taking the key would wait
    for a notification that never comes."""
    monkeypatch.setattr("turnlog._postgres._RECHECK", 3600.0)
    url = server.url(schema="order")
    writer = turnlog.open(url)
    quiet = turnlog.Log(PostgresStore(url, notify=False))  # commits, notifies nobody
    holder = admin(server)
    try:
        writer.append("s", UserMessageAdded(text="first"))
        hold_followers_key(holder, "order")
        woken: list[bool] = []
        follower = threading.Thread(
            target=lambda: woken.append(writer.store.wait("s", 0, 30.0)),  # type: ignore[attr-defined]
            daemon=True,
        )
        follower.start()
        deadline = time.monotonic() + 10
        while not any(row[2] == "advisory" for row in waiting_for_locks(server)):
            assert time.monotonic() < deadline, "the follower did not wait for the key"
            threading.Event().wait(0.01)
        quiet.append("s", UserMessageAdded(text="unannounced"))
        holder.execute("COMMIT")
        follower.join(timeout=20)
        assert woken == [True]
    finally:
        holder.close()
        quiet.close()
        writer.close()


def hold_followers_key(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """Hold the key of ``schema``'s followers as a writer's notification does, in a
    transaction ``conn`` ends with COMMIT."""
    conn.execute("BEGIN")
    conn.execute(
        "SELECT pg_advisory_xact_lock(%s)", (postgres_module.follow_key(f"turnlog.{schema}"),)
    )


def waiting_for_locks(server: pgserver.Server) -> list[tuple[object, ...]]:
    """``(pid, wait_event_type, wait_event)`` of the backends waiting for a lock."""
    with admin(server) as conn:
        return conn.execute(
            "SELECT pid, wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock'"
        ).fetchall()


def test_a_follower_whose_lock_request_fails_starts_again_on_a_new_connection(
    server: pgserver.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LISTENing connection left without the followers' lock would never be
    notified: when the lock request fails (here past pool_timeout), the connection
    is closed, and the next wait takes a new one with the lock."""
    monkeypatch.setattr("turnlog._postgres._RECHECK", 3600.0)
    url = server.url(schema="lockfail", pool_timeout="1")
    log = turnlog.open(url)
    holder = admin(server)
    try:
        log.append("s", UserMessageAdded(text="first"))
        hold_followers_key(holder, "lockfail")
        with log.store.listen() as wait:  # type: ignore[attr-defined]
            with pytest.raises(StoreUnavailableError):
                wait("s", 0, 5.0)
            assert listening(server) == []
            holder.execute("COMMIT")
            woken: list[bool] = []
            follower = threading.Thread(target=lambda: woken.append(wait("s", 0, 30.0)))
            follower.start()
            while len(listening(server)) < 1 and follower.is_alive():
                threading.Event().wait(0.01)
            started = time.monotonic()
            log.append("s", UserMessageAdded(text="second"))
            follower.join(timeout=20)
            assert woken == [True] and time.monotonic() - started < 5
    finally:
        holder.close()
        log.close()


def test_a_follower_waits_for_the_followers_key_at_most_pool_timeout(
    server: pgserver.Server,
) -> None:
    """A writer holds the key only while its notification's transaction lasts; one
    stuck there is waited for at most pool_timeout, then the wait is an outage
    (StoreUnavailableError, which `Log.follow` rides out), not a hang."""
    log = turnlog.open(server.url(schema="stuck", pool_timeout="1"))
    holder = admin(server)
    try:
        log.append("s", UserMessageAdded(text="first"))
        hold_followers_key(holder, "stuck")
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            log.store.wait("s", 0, 30.0)  # type: ignore[attr-defined]
        assert time.monotonic() - started < 10
        assert listening(server) == []
    finally:
        holder.close()
        log.close()


def test_a_write_of_several_sessions_notifies_each_only_while_somebody_follows(
    server: pgserver.Server,
) -> None:
    """The notification of a write that moves several heads names each session, and
    is sent only while somebody holds the followers' lock (the lock is tried per row)."""
    store = PostgresStore(server.url(schema="multi"))
    spy = admin(server)
    follower = admin(server)
    try:
        spy.execute('LISTEN "turnlog.multi"')

        def write_both(seq: int) -> None:
            # (raw rows through the store: one transaction that moves two heads)
            def fn(txn: WriteTxn) -> None:
                for session in ("a", "b"):
                    txn.put_event(session, seq, b"row")
                    txn.set_head(session, seq, bytes(32))

            store.write(fn)

        def heard() -> list[str]:
            return sorted(n.payload for n in spy.notifies(timeout=0.3, stop_after=10))

        write_both(0)
        assert heard() == []
        follower.execute(
            "SELECT pg_advisory_lock_shared(%s)", (postgres_module.follow_key("turnlog.multi"),)
        )
        write_both(1)
        assert heard() == ["a", "b"]
    finally:
        spy.close()
        follower.close()
        store.close()


def until_followed(server: pgserver.Server) -> None:
    """Wait until a follower on ``server`` holds a followers' key: writers notify."""
    with admin(server) as conn:
        while not conn.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted"
        ).fetchone():
            threading.Event().wait(0.01)


def listening(server: pgserver.Server) -> list[tuple[object, ...]]:
    """The backends of ``server`` that follow (hold a follower's advisory lock) or whose
    last statement was a LISTEN."""
    with admin(server) as conn:
        return conn.execute(
            "SELECT pid, state, wait_event FROM pg_stat_activity WHERE query LIKE 'LISTEN%' "
            "OR pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' "
            "AND mode = 'ShareLock' AND granted)"
        ).fetchall()


def test_a_finished_or_closed_follow_unlistens_and_closes_its_connection(
    server: pgserver.Server,
) -> None:
    log = turnlog.open(server.url(schema="follow"))
    try:
        log.append("s", UserMessageAdded(text="0"))
        # A follow that ends by its timeout, having waited on its LISTEN connection.
        assert list(log.follow("s", 0, timeout=0.3)) == []
        assert listening(server) == []
        # A follow closed by its caller while it waits for more.
        follower = log.follow("s", 0, timeout=3600)
        got: list[turnlog.events.Event] = []
        reader = threading.Thread(target=lambda: got.append(next(follower)))
        reader.start()
        while not listening(server) and reader.is_alive():
            threading.Event().wait(0.01)
        log.append("s", UserMessageAdded(text="1"))
        reader.join(timeout=60)
        assert texts(got) == ["1"]
        follower.close()  # type: ignore[attr-defined]  # a generator: it closes
        assert listening(server) == []
        # Nobody holds the cluster-wide notification queue: it does not grow.
        with admin(server) as conn:
            usage = []
            for batch in range(3):
                log.append("s", UserMessageAdded(text=f"more {batch}"))
                conn.execute(
                    "SELECT pg_notify('turnlog.follow', n::text) "
                    "FROM generate_series(1, 20000) AS n"
                )
                row = conn.execute("SELECT pg_notification_queue_usage()").fetchone()
                usage.append(float(row[0]))  # type: ignore[index, arg-type]
        assert usage[2] <= usage[0], usage
    finally:
        log.close()


def test_a_follower_rides_out_restarts_and_a_terminated_connection_missing_nothing(
    server: pgserver.Server,
) -> None:
    url = server.url(schema="follow", pool_timeout="5")
    writer, reader = turnlog.open(url), turnlog.open(url)
    seen: list[turnlog.events.Event] = []
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            for event in reader.follow("s", outage=120):
                seen.append(event)
                if getattr(event.body, "text", None) == "end":
                    return
        except BaseException as exc:
            errors.append(exc)

    def append(text: str) -> None:
        while True:  # the writer retries with its key; the follower must not need to
            try:
                writer.append("s", Draft(body=UserMessageAdded(text=text), key=text))
                return
            except StoreUnavailableError:
                threading.Event().wait(0.05)

    try:
        append("first")
        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        n = 0
        for _ in range(3):
            for _ in range(15):
                append(f"m{n}")
                n += 1
            while len(seen) < n // 2 and follower.is_alive():
                threading.Event().wait(0.01)
            server.kill()
            server.start()
        while not listening(server) and follower.is_alive():
            append(f"m{n}")
            n += 1
        followers = [row[0] for row in listening(server)]
        assert followers
        with admin(server) as conn:
            for pid in followers:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(15):
            append(f"m{n}")
            n += 1
        append("end")
        follower.join(timeout=300)
        assert errors == []
        head = writer.head("s")
        assert head is not None
        assert [e.seq for e in seen] == list(range(head.seq + 1))
        assert texts(seen) == [  # type: ignore[attr-defined]
            "first",
            *(f"m{i}" for i in range(n)),
            "end",
        ]
    finally:
        writer.close()
        reader.close()


def test_a_follower_raises_once_the_store_stays_unreachable_past_its_outage(
    server: pgserver.Server,
) -> None:
    log = turnlog.open(server.url(schema="follow", pool_timeout="1"))
    try:
        log.append("s", UserMessageAdded(text="0"))
        follower = log.follow("s", timeout=3600, outage=2)
        assert next(follower).seq == 0
        server.kill()
        with pytest.raises(StoreUnavailableError):
            next(follower)
    finally:
        log.close()


# -- copy ----------------------------------------------------------------------------------
GOLDEN = Path(__file__).parent / "golden" / "v0.1.0" / "store"


def replay_all(log: turnlog.Log) -> int:
    """Replay every recorded request of ``log``; return how many (all must match)."""
    packer = turnlog.Packer(log)
    replayer = turnlog.Replayer(packer)
    replayed = 0
    for head in log.sessions():
        for event in log.read(head.session, kinds=["request"]):
            request = event.body
            assert isinstance(request, turnlog.events.RequestIssued)
            result = replayer.replay(
                head.session, event.seq, render=renderer_for(request, blobs=log.blob)
            )
            assert result.ok, (head.session, event.seq, result.difference)
            replayed += 1
    return replayed


def test_copy_lmdb_to_postgres_to_lmdb_keeps_every_hash_and_replays(
    logs: LogFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "golden"
    shutil.copytree(GOLDEN, source)  # LMDB writes a lock file beside the data
    middle = logs.open()
    url = pgserver.shared().url(schema=middle.store.schema)  # type: ignore[attr-defined]
    back = tmp_path / "back"
    assert main(["copy", str(source), url, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["ok"] and first["sessions"] > 0 and first["blobs"] > 0
    assert first["cached"] > 0  # the Packer's token counts travel too
    assert main(["copy", url, str(back)]) == 0
    assert "verify: ok" in capsys.readouterr().out
    with (
        turnlog.open(source, readonly=True) as original,
        turnlog.open(back, readonly=True) as returned,
    ):
        expected = dump(original)
        for log in (middle, returned):
            copied = dump(log)
            for part in ("sessions", "events", "blobs"):
                assert copied[part] == expected[part], part
            with log.store.read() as txn, original.store.read() as there:
                assert list(txn.cache_items()) == list(there.cache_items())
            assert log.verify().ok
        assert replay_all(middle) == replay_all(returned) == replay_all(original) > 40
        # Old idempotency keys still apply once on the copy.
        keyed = next(
            e for h in original.sessions() for e in original.read(h.session) if e.key is not None
        )
        again = middle.append(
            keyed.session,
            Draft(
                body=keyed.body,
                time=keyed.time,
                key=keyed.key,
                causation=keyed.causation,
                meta=keyed.meta,
            ),
        )
        assert again.duplicate and again.first_seq == keyed.seq


def test_copy_of_a_schema_onto_itself_is_a_usage_error_as_for_a_directory(
    logs: LogFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    log = logs.open()
    log.append("s", UserMessageAdded(text="a"))
    url = pgserver.shared().url(schema=log.store.schema)  # type: ignore[attr-defined]
    # The same store spelled another way (the other scheme, the query in another order).
    other = url.replace("postgresql://", "postgres://")
    for dst in (url, other):
        assert main(["copy", url, dst]) == 2  # it said "copied 1 session" and exited 0
        out, err = capsys.readouterr()
        assert out == "" and "SRC and DST are the same store" in err


def test_copy_refuses_a_target_holding_a_session_of_the_source(logs: LogFactory) -> None:
    source, target = logs.open(), logs.open()
    source.append("s", UserMessageAdded(text="a"))
    target.append("s", UserMessageAdded(text="b"))
    before = dump(target)
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="already holds session 's'"):
        turnlog.log.copy_log(source, target)
    assert dump(target) == before


def test_verify_names_the_first_row_changed_behind_turnlogs_back(logs: LogFactory) -> None:
    log = logs.open()
    log.append("s", [UserMessageAdded(text=f"m{i}") for i in range(5)])
    schema = log.store.schema  # type: ignore[attr-defined]
    with admin(pgserver.shared()) as conn:
        conn.execute(
            f"UPDATE {schema}.events SET record = overlay(record placing "
            "'\\x4e'::bytea from length(record)) WHERE session = 's' AND seq IN (2, 4)"
        )
    report = log.verify()
    assert not report.ok
    assert (problem_of(report).session, problem_of(report).seq) == ("s", 2)


@pytest.mark.parametrize(
    ("sql", "seq", "reason"),
    [
        ("DELETE FROM {s}.idem WHERE key = 'b1-1'", 4, "has no entry for the event's key 'b1-1'"),
        (
            "UPDATE {s}.idem SET seq = 0 WHERE key = 'b1-1'",
            4,
            "maps the event's key 'b1-1' to seq 0",
        ),
        ("UPDATE {s}.idem SET key = 'other' WHERE key = 'b1-1'", 4, "has no entry"),
        (
            "INSERT INTO {s}.idem VALUES ('s', 'stray', 1)",
            1,
            "holds the key 'stray' at seq 1, where the session has an event keyed 'b0-1'",
        ),
    ],
    ids=["delete", "move", "rename", "add"],
)
def test_verify_names_an_idempotency_row_changed_with_sql(
    logs: LogFactory, capsys: pytest.CaptureFixture[str], sql: str, seq: int, reason: str
) -> None:
    log = logs.open()
    log.append("s", keyed(0))
    log.append("s", keyed(1))
    schema = log.store.schema  # type: ignore[attr-defined]
    with admin(pgserver.shared()) as conn:
        conn.execute(sql.format(s=schema))
    report = log.verify()
    assert not report.ok and report.problem is not None
    assert (problem_of(report).session, problem_of(report).seq) == ("s", seq)
    assert reason in problem_of(report).reason and "turnlog copy" in problem_of(report).reason
    url = pgserver.shared().url(schema=schema)
    assert main(["--store", url, "verify", "s"]) == 1
    assert f"s#{seq}: the idempotency index" in capsys.readouterr().out
    if "DELETE" in sql:  # what goes unreported otherwise: a retry appends the key again
        again = log.append("s", Draft(body=UserMessageAdded(text="batch 1 message 1"), key="b1-1"))
        assert not again.duplicate and again.first_seq == 6


# -- one validation on every backend ------------------------------------------------------------
def _old_store_with_a_nul_key(path: Path) -> turnlog.Log:
    """An LMDB store as turnlog wrote it before keys with a NUL were refused."""
    import blake3
    import msgspec

    log = turnlog.open(path)
    log.append("s", Draft(body=UserMessageAdded(text="first"), key="a"))
    prev = log.head("s").hash  # type: ignore[union-attr]
    event = turnlog.events.Event(session="s", seq=1, body=UserMessageAdded(text="nul"), key="k\x00")
    canonical = msgspec.msgpack.Encoder(order="deterministic").encode(event)
    digest = blake3.blake3(prev + canonical).digest()

    def put(txn: turnlog.stores.WriteTxn) -> None:
        txn.put_event("s", 1, prev + digest + canonical)
        txn.put_idempotency("s", "k\x00", 1)
        txn.set_head("s", 1, digest)

    log.store.write(put)
    return log


def test_a_nul_in_a_key_is_refused_on_every_backend_and_old_lmdb_keys_still_read(
    tmp_path: Path, logs: LogFactory
) -> None:
    target = logs.open()
    with _old_store_with_a_nul_key(tmp_path / "old") as old:
        assert [e.key for e in old.read("s")] == ["a", "k\x00"]
        assert old.verify().ok and old.find_key("s", "k\x00") == 1
        for log in (old, target, turnlog.open(":memory:")):
            with pytest.raises(turnlog.errors.InvalidEventError, match="NUL"):
                log.append("s", Draft(body=UserMessageAdded(text="x"), key="b\x00"))
        assert target.find_key("s", "k\x00") is None  # a lookup, not a StoreError
        # A copy to PostgreSQL names the key instead of failing with a generic error.
        with pytest.raises(
            turnlog.errors.InvalidEventError, match=r"s#1: idempotency key 'k\\x00' holds a NUL"
        ):
            turnlog.log.copy_log(old, target)
        assert target.sessions() == []
        with turnlog.open(tmp_path / "new") as lmdb:  # LMDB still takes it
            turnlog.log.copy_log(old, lmdb)
            assert lmdb.verify().ok and lmdb.find_key("s", "k\x00") == 1


def test_a_batch_over_the_size_limit_is_refused_alike_before_anything_is_sent(
    tmp_path: Path, logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit (512 MiB; PostgreSQL takes no value of 1 GiB) is lowered to 1 MiB here
    so the test holds a few MiB, not gigabytes."""
    import turnlog._log

    assert turnlog._log.MAX_BATCH_BYTES == 2**29
    monkeypatch.setattr(turnlog._log, "MAX_BATCH_BYTES", 2**20)
    big = [UserMessageAdded(text=f"{n} " + "x" * 300_000) for n in range(4)]  # as blobs
    for log in (logs.open(), turnlog.open(tmp_path / "lmdb"), turnlog.open(":memory:")):
        before = dump(log)
        with pytest.raises(
            turnlog.errors.EventTooLargeError, match="at most 1048576 bytes"
        ) as caught:
            log.append("s", big)
        assert "split it" in str(caught.value)
        with pytest.raises(turnlog.errors.EventTooLargeError, match="at most 1048576 bytes"):
            log.put_blob(b"x" * (2**20 + 1))
        assert dump(log) == before
        assert log.append("s", big[:3]).last_seq == 2  # under the limit


def test_a_schema_name_too_long_for_the_notify_channel_is_refused_before_connecting() -> None:
    shared = pgserver.shared()
    longest = "s" * 55
    for name in ("s" * 56, "s" * 63):
        with pytest.raises(turnlog.errors.InvalidArgumentError, match="at most 55"):
            turnlog.open(shared.url(schema=name))
    with admin(shared) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'sssss%'"
        ).fetchone()
    assert found == (0,)  # nothing was created
    try:
        with turnlog.open(shared.url(schema=longest)) as log:
            log.append("s", UserMessageAdded(text="hi"))
            assert [e.seq for e in log.follow("s", timeout=0.1)] == [0]
    finally:
        with admin(shared) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {longest} CASCADE")


def copy_source(path: Path, sessions: int, *, blobs: int = 0) -> turnlog.Log:
    """An LMDB store of ``sessions`` sessions of four keyed events, the first
    ``blobs`` of them with a tool output large enough to be a blob."""
    log = turnlog.open(path, sync=False)
    for n in range(sessions):
        batch: list[Draft | turnlog.events.Body] = list(keyed(n, 3))
        if n < blobs:
            batch.append(
                turnlog.events.ToolResultAdded(call_id="c", tool_name="t", output=f"{n} " * 40_000)
            )
        else:
            batch.append(UserMessageAdded(text=f"session {n}"))
        log.append(f"s{n:04}", batch)
    return log


def heads_in(schema: str) -> int:
    with admin(pgserver.shared()) as conn:
        row = conn.execute(f"SELECT count(*) FROM {schema}.heads").fetchone()
    count = row[0] if row is not None else None
    assert isinstance(count, int)
    return count


def test_a_killed_copy_is_reported_unfinished_and_resumes_where_it_stopped(
    logs: LogFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import signal

    source = copy_source(tmp_path / "src", 400, blobs=30)
    expected = dump(source)
    source.close()
    target = logs.open()
    schema = target.store.schema  # type: ignore[attr-defined]
    url = pgserver.shared().url(schema=schema)
    killed = 0
    for threshold in (60, 200, 320):
        proc = subprocess.Popen(
            [sys.executable, "-m", "turnlog.tools", "copy", str(tmp_path / "src"), url],
            stdout=subprocess.DEVNULL,
        )
        while proc.poll() is None and heads_in(schema) < threshold:
            threading.Event().wait(0.005)
        proc.send_signal(signal.SIGKILL)
        if proc.wait() != -signal.SIGKILL:
            continue
        killed += 1
        assert main(["--store", url, "verify"]) == 1
        out = capsys.readouterr().out
        assert "unfinished copy" in out and str(tmp_path / "src") in out
        assert main(["--store", url, "sessions", "--json"]) == 0
        assert "unfinished copy" in json.loads(capsys.readouterr().out)["unfinished_copy"]
    assert killed >= 2  # copies were killed half way (each kill left a resumable target)
    assert main(["copy", str(tmp_path / "src"), url]) == 0
    assert "verify: ok" in capsys.readouterr().out
    copied = dump(target)
    for part in ("sessions", "events", "blobs"):
        assert copied[part] == expected[part], part
    assert turnlog.log.unfinished_copy(target) is None
    assert main(["--store", url, "verify"]) == 0


def test_copy_refuses_a_damaged_source_instead_of_laundering_it(
    logs: LogFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = logs.open()
    source.append("a", UserMessageAdded(text="fine"))
    source.append("s", [UserMessageAdded(text=f"m{i}") for i in range(5)])
    schema = source.store.schema  # type: ignore[attr-defined]
    url = pgserver.shared().url(schema=schema)
    moved = source.get("s", 2).hash
    with admin(pgserver.shared()) as conn:  # the head moved back past rows that remain
        conn.execute(f"UPDATE {schema}.heads SET seq = 2, hash = %s WHERE session = 's'", (moved,))
    assert main(["--store", url, "verify"]) == 1
    capsys.readouterr()
    target = tmp_path / "copy"
    assert main(["copy", url, str(target)]) == 3
    err = capsys.readouterr().err
    assert "fails verification at s#" in err and "the head says seq 2" in err
    assert "nothing of 's' was copied" in err
    assert main(["--store", str(target), "verify"]) == 1  # never a copy that passes
    assert "unfinished copy" in capsys.readouterr().out


def test_copy_and_verify_hold_a_bounded_share_of_the_blobs_at_once(
    logs: LogFactory, tmp_path: Path
) -> None:
    import os
    import tracemalloc

    source = logs.open()
    blob = 4 * 2**20
    for n in range(16):  # 64 MiB of blobs; one page of the old listing held them all
        source.append(f"s{n}", UserMessageAdded(text=os.urandom(blob // 2).hex()))
    tracemalloc.start()
    try:
        assert source.verify().ok
        verify_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        with turnlog.open(tmp_path / "copy") as target:
            copied = turnlog.log.copy_log(source, target)
            copy_peak = tracemalloc.get_traced_memory()[1]
            assert copied.blobs == 16
    finally:
        tracemalloc.stop()
    # A page of blobs is 8 MiB (or one larger blob), and the copy's write holds about
    # as much: measured 12.6 MB for each (before: 67 MB, every blob at once).
    assert verify_peak < 5 * blob, verify_peak
    assert copy_peak < 5 * blob, copy_peak


def test_copy_racing_a_writer_of_the_target_is_a_conflict_not_corruption(logs: LogFactory) -> None:
    source, target = logs.open(), logs.open()
    for name in ("a", "b", "c"):
        source.append(name, [UserMessageAdded(text=f"{name}{i}") for i in range(3)])
    url = pgserver.shared().url(schema=target.store.schema)  # type: ignore[attr-defined]

    def another_writer(done: turnlog.log.Copied) -> None:
        if done.sessions == 1:  # after "a", before "c" is copied: a writer creates it
            with turnlog.open(url) as other:
                other.append("c", UserMessageAdded(text="written meanwhile"))

    with pytest.raises(AppendConflictError, match="written by another writer") as caught:
        turnlog.log.copy_log(source, target, progress=another_writer)
    assert (caught.value.session, caught.value.expected, caught.value.actual) == ("c", -1, 0)
    assert texts(target.read("c")) == [  # type: ignore[attr-defined]
        "written meanwhile"
    ]
    assert "unfinished copy" in str(target.verify().problem)


def test_copy_of_some_sessions_brings_their_lineage_and_their_blobs_only(
    logs: LogFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    source, shard = logs.open(), logs.open()
    big = "x" * 100_000
    source.append("base", [UserMessageAdded(text=f"b{i}") for i in range(4)])
    source.append(
        "base", turnlog.events.ToolResultAdded(call_id="c", tool_name="t", output=big + "base")
    )
    source.fork("base", 2, "fork1")
    source.append("fork1", UserMessageAdded(text="f1"))
    source.fork("fork1", 1, "fork2")
    source.append("fork2", UserMessageAdded(text="f2"))
    source.append(
        "other", turnlog.events.ToolResultAdded(call_id="c", tool_name="t", output=big + "other")
    )
    src = pgserver.shared().url(schema=source.store.schema)  # type: ignore[attr-defined]
    dst = pgserver.shared().url(schema=shard.store.schema)  # type: ignore[attr-defined]
    assert main(["copy", src, dst, "--session", "fork2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and (result["sessions"], result["blobs"]) == (3, 1)
    assert [h.session for h in shard.sessions()] == ["base", "fork1", "fork2"]
    for name in ("base", "fork1", "fork2"):
        assert [e.hash for e in shard.read(name)] == [e.hash for e in source.read(name)]
    assert shard.verify().ok
    # Later events of the source: the same copy brings the shard up to date.
    source.append("fork2", UserMessageAdded(text="f3"))
    assert main(["copy", src, dst, "--session", "fork2", "--session", "other"]) == 0
    capsys.readouterr()
    assert dump(shard)["events"] == dump(source)["events"]
    # A session the shard holds with other events is refused, nothing written.
    shard.append("other", UserMessageAdded(text="diverged"))
    source.append("other", UserMessageAdded(text="on the source"))
    before = dump(shard)
    assert main(["copy", src, dst, "--session", "other"]) == 3
    assert "already holds session 'other' with other events" in capsys.readouterr().err
    assert dump(shard) == before
    assert main(["copy", src, dst, "--session", "nothing"]) == 3
    assert "no session 'nothing'" in capsys.readouterr().err


def test_an_export_of_one_session_imports_back_to_the_same_hashes(
    logs: LogFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = logs.open()
    source.append(
        "base",
        [
            UserMessageAdded(text="b0"),
            turnlog.events.ToolResultAdded(call_id="c", tool_name="t", output="y" * 100_000),
        ],
    )
    source.fork("base", 1, "fork")
    source.append("fork", Draft(body=UserMessageAdded(text="f1"), key="k1"))
    source.append("other", UserMessageAdded(text="not exported"))
    url = pgserver.shared().url(schema=source.store.schema)  # type: ignore[attr-defined]
    backup = tmp_path / "fork.jsonl"
    assert main(["--store", url, "export", "fork", "--complete", "-o", str(backup)]) == 0
    capsys.readouterr()
    shard = logs.open()
    for where in (
        pgserver.shared().url(schema=shard.store.schema),  # type: ignore[attr-defined]
        str(tmp_path / "lmdb"),
    ):
        assert main(["--store", where, "import", str(backup), "--json"]) == 0
        result = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert result["sessions"] == ["base", "fork"] and result["appended"] == 4
        with turnlog.open(where) as target:
            for name in ("base", "fork"):
                assert [e.hash for e in target.read(name)] == [e.hash for e in source.read(name)]
            assert target.verify().ok and target.head("other") is None
            assert target.append(
                "fork", Draft(body=UserMessageAdded(text="f1"), key="k1")
            ).duplicate  # its keys came along
        assert main(["--store", where, "import", str(backup), "--json"]) == 0  # again: a no-op
        assert json.loads(capsys.readouterr().out.splitlines()[-1])["appended"] == 0
    # A changed line is refused, nothing written.
    changed = tmp_path / "changed.jsonl"
    changed.write_bytes(backup.read_bytes().replace(b'"text":"f1"', b'"text":"F1"'))
    fresh = turnlog.open(tmp_path / "fresh")
    before = dump(fresh)
    fresh.close()
    assert main(["--store", str(tmp_path / "fresh"), "import", str(changed)]) == 3
    assert "do not verify at fork#1" in capsys.readouterr().err
    with turnlog.open(tmp_path / "fresh") as again:
        assert dump(again)["events"] == before["events"] == {}


# -- full read --------------------------------------------------------------------------------
def test_a_full_read_sends_each_page_before_it_awaits_the_one_before_in_binary(
    logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Log.read` of a session of five pages: after the head (the session must exist),
    each page's query is sent before the rows of the page before it are awaited, in one
    pipeline, so the server reads a page while the client takes in the one before; the
    records arrive in binary (as they are stored, not as hex text twice their size)."""
    monkeypatch.setattr(postgres_module, "_PAGE", 4)
    log = logs.open()
    log.append("s", [UserMessageAdded(text=f"m{i}") for i in range(18)])
    steps: list[str] = []
    execute, fetchall = psycopg.Connection.execute, psycopg.Cursor.fetchall

    def spy_execute(self: psycopg.Connection[Any], query: Any, *a: Any, **k: Any) -> Any:
        text = bytes(query) if isinstance(query, bytes) else str(query).encode()
        if b"FROM" in text and b".events" in text:
            steps.append("send" if self._pipeline is not None else "send alone")
        return execute(self, query, *a, **k)

    def spy_fetchall(self: psycopg.Cursor[Any]) -> Any:
        rows = fetchall(self)
        if self.description is not None and self.description[-1].name == "record":
            result = self.pgresult
            assert result is not None and result.fformat(1) == psycopg.pq.Format.BINARY
            steps.append("await")
        return rows

    monkeypatch.setattr(psycopg.Connection, "execute", spy_execute)
    monkeypatch.setattr(psycopg.Cursor, "fetchall", spy_fetchall)
    assert texts(log.read("s")) == [f"m{i}" for i in range(18)]
    assert " ".join(steps) == "send send await send await send await send await await"


def test_a_full_read_returns_what_a_scan_does_over_gaps_and_rows_past_the_head(
    logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records of every range, the head read before or with the first page, are the
    scan's: a row missing from the middle is skipped, rows past the head (a damaged
    store) are left out, as `Log.verify` reports them."""
    monkeypatch.setattr(postgres_module, "_PAGE", 3)
    log = logs.open()
    log.append("s", [UserMessageAdded(text=f"m{i}") for i in range(10)])
    schema = log.store.schema  # type: ignore[attr-defined]
    with admin(pgserver.shared()) as conn:
        conn.execute(f"DELETE FROM {schema}.events WHERE session = 's' AND seq = 4")
        conn.execute(
            f"INSERT INTO {schema}.events SELECT session, seq + 1, record "
            f"FROM {schema}.events WHERE session = 's' AND seq = 9"
        )
    store = log.store
    for start in range(12):
        for stop in (None, *range(13)):
            for head_first in (False, True):
                with store.read() as txn:
                    if head_first:
                        txn.head("s")
                    records = txn.records("s", start, stop)
                with store.read() as txn:
                    scanned = [record for _, record in txn.scan("s", start, stop)]
                assert records == scanned, (start, stop, head_first)
    with store.read() as txn:
        assert len(txn.records("s", 0, None)) == 9  # 0-9 but 4
    assert not log.verify().ok


# -- replay in one round trip ------------------------------------------------------------------
def exchanges_of(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The round trips psycopg makes, recorded as they go: a statement sent outside a
    pipeline is one (it waits for its answer), a pipeline is one (it waits at its end)."""
    seen: list[str] = []
    execute = psycopg.Connection.execute
    pipeline = psycopg.Connection.pipeline

    def spy_execute(self: psycopg.Connection[object], query: str, *a: Any, **k: Any) -> object:
        if self._pipeline is None:
            seen.append(str(query))
        return execute(self, query, *a, **k)

    @contextlib.contextmanager
    def spy_pipeline(self: psycopg.Connection[object]) -> Iterator[object]:
        if self._pipeline is None:
            seen.append("pipeline")
        with pipeline(self) as p:
            yield p

    monkeypatch.setattr(psycopg.Connection, "execute", spy_execute)
    monkeypatch.setattr(psycopg.Connection, "pipeline", spy_pipeline)
    return seen


def test_a_replay_reads_its_request_head_and_missing_events_in_one_round_trip(
    logs: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = logs.open()
    replayer = turnlog.Replayer(turnlog.Packer(log))
    policy = turnlog.Policy(context_window=4_000, output_reserve=500)
    requests = []
    for turn in range(3):
        log.append("s", UserMessageAdded(text=f"question {turn}"))
        requests.append(replayer.record("s", policy=policy, model="m", time=turn).request_seq)
    fresh = turnlog.Replayer(turnlog.Packer(log))
    assert fresh.replay("s", requests[0]).ok  # loads the token counts (a read of its own)
    seen = exchanges_of(monkeypatch)
    for seq in requests[1:]:  # the kept view grown by the events it lacks
        assert fresh.replay("s", seq).ok
        assert seen == ["pipeline"], seen
        seen.clear()
    other = turnlog.Replayer(fresh.packer)  # the token counts loaded
    assert other.replay("s", requests[-1]).ok  # a fresh view: the whole session
    assert seen == ["pipeline"], seen
    seen.clear()
    assert other.replay("s", requests[0]).ok  # older than the kept view: the whole session
    assert seen == ["pipeline"], seen
    seen.clear()
    # A fork's lineage holds its source's events, which the pipeline did not read: the
    # replay reads again, in a snapshot of its own, and still matches.
    log.fork("s", requests[-1], "f")
    log.append("f", UserMessageAdded(text="question on the fork"))
    forked = replayer.record("f", policy=policy, model="m", time=9).request_seq
    seen.clear()
    assert turnlog.Replayer(fresh.packer).replay("f", forked).ok
    assert seen[0] == "pipeline" and seen[-1] == "COMMIT", seen


def test_replays_and_reads_keep_the_statements_prepared_on_their_connection(
    logs: LogFactory,
) -> None:
    """A read ends with COMMIT: after a ROLLBACK psycopg forgets every statement it
    prepared on the connection (and deallocates them on the server), so each replay
    parsed and planned its statements again, under new names."""
    first = logs.open()
    url = pgserver.shared().url(schema=first.store.schema, pool_size="1")  # type: ignore[attr-defined]
    log = turnlog.open(url)
    try:
        replayer = turnlog.Replayer(turnlog.Packer(log))
        policy = turnlog.Policy(context_window=4_000, output_reserve=500)
        requests = []
        for turn in range(4):
            log.append("s", UserMessageAdded(text=f"question {turn}"))
            requests.append(replayer.record("s", policy=policy, model="m", time=turn).request_seq)
        store = cast(PostgresStore, log.store)

        def prepared() -> set[str]:
            with store._pool.connection() as conn:
                rows = conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
            return {str(row[0]) for row in rows}

        for seq in requests:
            assert turnlog.Replayer(turnlog.Packer(log)).replay("s", seq).ok
            log.head("s")  # an ordinary read
        before = prepared()
        assert len(before) >= 3
        for _ in range(3):
            for seq in requests:
                assert turnlog.Replayer(turnlog.Packer(log)).replay("s", seq).ok
                log.head("s")
        assert prepared() == before
    finally:
        log.close()


def test_a_failed_read_ahead_leaves_its_connection_usable_with_its_prepared_statements(
    server: pgserver.Server,
) -> None:
    """A connection the server dropped is replaced (a read-ahead only reads: it runs
    again). The events table locked: the pipeline's read of the request fails on a
    fresh connection (as its statement is first prepared), the server skips the rest
    and the error says so; the pool's one connection then replays again, its prepared
    statements and psycopg's cache of them still in agreement."""
    url = server.url(schema="ahead", pool_size="1", options="-c%20lock_timeout%3D300")
    log = turnlog.open(url)
    try:
        replayer = turnlog.Replayer(turnlog.Packer(log))
        policy = turnlog.Policy(context_window=4_000, output_reserve=500)
        log.append("s", UserMessageAdded(text="question"))
        seq = replayer.record("s", policy=policy, model="m", time=0).request_seq
        fresh = turnlog.Packer(log)
        drop = (
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        with admin(server) as conn:
            conn.execute(drop)  # the next connection prepares every statement afresh
            with conn.transaction():
                conn.execute("LOCK TABLE ahead.events IN ACCESS EXCLUSIVE MODE")
                with pytest.raises(StoreUnavailableError, match="lock_timeout"):
                    turnlog.Replayer(fresh).replay("s", seq)
        for _ in range(3):
            assert turnlog.Replayer(fresh).replay("s", seq).ok
        with admin(server) as conn:
            conn.execute(drop)
        assert turnlog.Replayer(fresh).replay("s", seq).ok
    finally:
        log.close()
