"""`turnlog serve` over HTTP: every page and its JSON, read-only, the token, the headers.

The browser tests (`test_web_browser.py`) check what runs in a page; these check
what the server answers, on real LMDB stores served read-only as the command does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

pytest.importorskip("starlette", reason="the web extra: pip install 'turnlog[web]'")

import httpx
import msgspec
import pgserver
import turnlog
from support import dump, lapsing_memories
from turnlog.events import UserMessageAdded
from turnlog.tools.cli import main
from turnlog.tools.web import CSP, Server
from turnlog.tools.web._inspector import session_href
from web_support import HOSTILE_SESSION, demo_store, hostile_store


@pytest.fixture
def demo_path(tmp_path: Path) -> Path:
    return demo_store(tmp_path)


@pytest.fixture
def served(demo_path: Path) -> Iterator[Server]:
    with turnlog.open(demo_path, readonly=True) as log:
        server = Server(log).start()
        yield server
        server.stop()


def get(server: Server, path: str, **kwargs: object) -> httpx.Response:
    return httpx.get(server.base + path, timeout=60, **kwargs)  # type: ignore[arg-type]


def demo_pages() -> list[str]:
    return [
        "/",
        "/?q=demo-m",
        "/sessions/demo",
        "/sessions/demo?from=0&limit=50",
        "/sessions/demo/events/5",
        "/sessions/demo/requests/427",
        "/sessions/demo/requests/427?decision=summarized&kind=tool_result",
        "/sessions/demo/diff/420/427",
        "/sessions/demo/summaries",
        "/sessions/demo/memories",
        "/sessions/demo/memories?q=decimal",
    ]


def test_every_page_and_its_json_answer_on_the_demo_store(served: Server) -> None:
    for path in demo_pages():
        page = get(served, path)
        assert page.status_code == 200, (path, page.text[:500])
        assert page.headers["content-type"].startswith("text/html")
        data = get(served, "/api" + path)
        assert data.status_code == 200, (path, data.text[:500])
        assert isinstance(data.json(), dict)
    index = get(served, "/api/").json()
    assert [s["session"] for s in index["sessions"]] == ["demo", "demo-memories"]
    demo = index["sessions"][0]
    assert demo["events"] == 429 and demo["requests"] == 41 and demo["verify"]["ok"]
    assert demo["model"] == "demo-model" and demo["first"].startswith("2024-03-12")


def test_the_receipt_holds_the_prompt_budget_decisions_and_body(served: Server) -> None:
    receipt = get(served, "/api/sessions/demo/requests/427").json()
    packed = turnlog.Replayer(turnlog.Packer(served.log)).explain("demo", 427)
    assert receipt["tokens"] == packed.tokens
    assert len(receipt["messages"]) == len(packed.prompt.messages)
    assert [m["tokens"] for m in receipt["messages"]] == list(packed.message_tokens)
    assert receipt["filter"]["matching"] == len(packed.decisions)
    assert sum(receipt["decision_counts"].values()) == len(packed.decisions)
    assert {b["name"] for b in receipt["bar"]["levels"]} >= {"warning", "compact", "blocking"}
    assert receipt["previous"]["seq"] == 420 and receipt["previous"]["shared_tokens"] > 0
    sources = [s for m in receipt["messages"] for s in m["sources"]]
    assert sources and all(s["href"].startswith("/sessions/demo/events/") for s in sources)
    body = get(served, receipt["body"]["href"]).json()
    assert json.loads(body["text"])["messages"] and body["format"] == "neutral"
    assert body["bytes"] == len(msgspec.json.encode(packed.prompt))
    assert receipt["requests"] == {"prev": 420, "next": None}
    summarized = get(served, "/api/sessions/demo/requests/427?decision=summarized").json()
    assert summarized["decisions"] and {d["decision"] for d in summarized["decisions"]} == {
        "summarized"
    }
    replay = get(served, "/api/sessions/demo/requests/427/replay").json()
    assert replay["ok"] is True and replay["replayed_hash"] == replay["recorded_hash"]


def test_the_receipt_counts_the_shared_prefix_as_diff_does(served: Server) -> None:
    replayer = turnlog.Replayer(turnlog.Packer(served.log))
    requests = replayer.requests("demo")
    for a, b in [
        (requests[0], requests[1]),
        (requests[20], requests[21]),
        (requests[-2], requests[-1]),
    ]:
        receipt = get(served, f"/api/sessions/demo/requests/{b}").json()
        diff = replayer.diff("demo", a, b)
        assert receipt["previous"]["seq"] == a
        assert receipt["previous"]["shared_messages"] == diff.shared_messages
        assert receipt["previous"]["shared_tokens"] == diff.shared_tokens
        assert receipt["previous"]["system_changed"] == diff.system_changed
    first = get(served, f"/api/sessions/demo/requests/{requests[0]}").json()
    assert first["previous"] is None and first["requests"]["prev"] is None


def test_summaries_and_memories_show_the_tree_and_the_block(served: Server) -> None:
    summaries = get(served, "/api/sessions/demo/summaries").json()
    assert summaries["nodes"] and summaries["tree"]
    assert summaries["section"]["text"]
    shown = [n for n in summaries["nodes"] if n["shown"]]
    assert shown and all(n["shown"]["kind"] == "compaction" for n in shown)
    memories = get(served, "/api/sessions/demo/memories?q=decimal").json()
    assert memories["memories"] and memories["block_in_force"]["text"]
    assert memories["block_history"] and memories["results"]


def test_the_memories_page_says_when_each_lapses(tmp_path: Path) -> None:
    """The memories page listed a memory past its ``expires_seq`` like a live one."""
    path = tmp_path / "mem"
    lapsing_memories(path)
    with turnlog.open(path, readonly=True) as log:
        server = Server(log).start()
        try:
            listed = get(server, "/api/sessions/chat/memories").json()["memories"]
            assert {m["memory_id"]: (m["expires"], m["lapsed"]) for m in listed} == {
                "m0": ("after #1 (lapsed)", True),
                "m1": ("after #5", False),
                "m2": ("2024-03-12 09:01:56", False),
                "m3": ("", False),
            }
            page = get(server, "/sessions/chat/memories").text
            assert "<th>expires</th>" in page and "after #1 (lapsed)" in page
        finally:
            server.stop()


def test_a_long_session_is_served_a_window_at_a_time(tmp_path: Path) -> None:
    with turnlog.open(tmp_path / "long") as log:
        log.append("long", [UserMessageAdded(text=f"message {i}") for i in range(3000)])
    with turnlog.open(tmp_path / "long", readonly=True) as log:
        server = Server(log).start()
        try:
            latest = get(server, "/api/sessions/long").json()
            assert [e["seq"] for e in latest["events"]] == list(range(2800, 3000))
            assert latest["follow"] and latest["prev_start"] == 2600
            middle = get(server, "/api/sessions/long?from=1000&limit=10").json()
            assert [e["seq"] for e in middle["events"]] == list(range(1000, 1010))
            assert middle["follow"] is None and middle["next_start"] == 1010
            assert get(server, "/api/sessions/long?limit=100000").status_code == 400
            assert get(server, "/api/sessions/long?from=x").status_code == 400
        finally:
            server.stop()


def test_the_timeline_filters_by_kind(served: Server) -> None:
    compactions = get(served, "/api/sessions/demo?kind=compaction").json()
    assert compactions["events"] and {e["kind"] for e in compactions["events"]} == {"compaction"}
    assert compactions["follow"] is not None and "kind=compaction" in compactions["follow"]
    two = get(served, "/api/sessions/demo?kind=request&kind=response&limit=5&from=0").json()
    assert [e["kind"] for e in two["events"]] == ["request", "response"] * 2 + ["request"]
    after = get(
        served, f"/api/sessions/demo?kind=request&kind=response&limit=5&from={two['next_start']}"
    ).json()
    assert after["events"][0]["seq"] == two["next_start"] > two["events"][-1]["seq"]
    assert after["prev_start"] == two["events"][0]["seq"]
    assert get(served, "/api/sessions/demo?kind=bogus").status_code == 400
    assert get(served, "/sessions/demo?kind=tool_result").status_code == 200


def test_the_follow_stream_sends_new_events_of_the_kinds_asked(tmp_path: Path) -> None:
    path = tmp_path / "follow"
    with turnlog.open(path) as log:
        log.append("f", UserMessageAdded(text="first"))
    with turnlog.open(path, readonly=True) as log:
        server = Server(log).start()
        try:
            url = server.base + "/api/sessions/f/follow?after=0&kind=notification"
            with httpx.stream("GET", url, timeout=60) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                code = (
                    "import sys, turnlog; log = turnlog.open(sys.argv[1]); "
                    "log.append('f', [turnlog.events.UserMessageAdded(text='skipped'), "
                    "turnlog.events.NotificationAdded(source='ci', text='<b>shown</b>')])"
                )
                subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
                lines = stream.iter_lines()
                data = next(line for line in lines if line.startswith("data: "))
            row = json.loads(data[6:])
            assert row["seq"] == 2 and row["kind"] == "notification"
            assert get(server, "/api/sessions/none/follow").status_code == 404
            assert get(server, "/api/sessions/f/follow?after=-5").status_code == 400
            past = get(server, "/api/sessions/f/follow?after=9")  # more than the store holds
            assert past.status_code == 400 and "past the head" in past.text
        finally:
            server.stop()


def test_a_request_that_does_not_replay_says_where_it_differs(tmp_path: Path) -> None:
    path = tmp_path / "differs"
    with turnlog.open(path) as log:
        log.append("d", [UserMessageAdded(text="hello"), UserMessageAdded(text="again")])
        replayer = turnlog.Replayer(turnlog.Packer(log))
        real = replayer.record("d", policy=turnlog.Policy(context_window=8000, output_reserve=1000))
        body = log.get("d", real.request_seq).body
        assert isinstance(body, turnlog.events.RequestIssued)
        forged = msgspec.structs.replace(
            body, prompt_hash="0" * 64, digests=bytes(8) + body.digests[8:]
        )
        seq = log.append("d", forged).last_seq
    with turnlog.open(path, readonly=True) as log:
        server = Server(log).start()
        try:
            good = get(server, f"/api/sessions/d/requests/{real.request_seq}/replay").json()
            bad = get(server, f"/api/sessions/d/requests/{seq}/replay").json()
            assert good["ok"] and not bad["ok"]
            assert bad["difference"].startswith("first difference at"), bad
            assert get(server, f"/sessions/d/requests/{seq}").status_code == 200
        finally:
            server.stop()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_write_methods_are_refused_and_the_store_is_unchanged(demo_path: Path, method: str) -> None:
    with turnlog.open(demo_path) as log:
        before = dump(log)
    with turnlog.open(demo_path, readonly=True) as log:
        server = Server(log).start()
        try:
            for path in [
                *demo_pages(),
                "/api/",
                "/api/sessions/demo/requests/427/replay",
                "/api/sessions/demo",
                "/sessions/new",
                "/api/sessions/demo/follow",
            ]:
                response = httpx.request(
                    method, server.base + path, timeout=30, json={"type": "user", "text": "x"}
                )
                assert response.status_code == 405, (method, path)
                assert response.headers["allow"] == "GET, HEAD"
        finally:
            server.stop()
    with turnlog.open(demo_path) as log:
        assert dump(log) == before


def test_every_response_carries_the_security_headers(served: Server) -> None:
    for path in ["/", "/api/", "/static/inspector.js", "/nope", "/sessions/none"]:
        response = get(served, path)
        assert response.headers["content-security-policy"] == CSP, path
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    assert get(served, "/nope").status_code == 404
    assert get(served, "/sessions/none").status_code == 404
    assert get(served, "/api/sessions/none").json()["status"] == 404
    assert get(served, "/api/sessions/demo/requests/412").status_code == 404  # not a request
    assert get(served, "/static/../../pyproject.toml").status_code == 404
    assert get(served, "/sessions/%ff%fe").status_code == 400
    assert get(served, "/sessions/%2e%2e").status_code == 404


def test_a_loopback_server_refuses_a_foreign_host_header(served: Server) -> None:
    assert get(served, "/", headers={"host": "attacker.example"}).status_code == 421
    assert get(served, "/", headers={"host": f"localhost:{served.port}"}).status_code == 200
    assert get(served, "/", headers={"host": f"127.0.0.2:{served.port}"}).status_code == 200
    assert get(served, "/", headers={"host": f"[::1]:{served.port}"}).status_code == 200
    assert get(served, "/", headers={"host": "127.0.0.1.attacker.example"}).status_code == 421


def test_a_server_on_another_address_needs_its_token(demo_path: Path) -> None:
    with turnlog.open(demo_path, readonly=True) as log:
        with pytest.raises(ValueError, match="needs a token"):
            Server(log, host="0.0.0.0")
        server = Server(log, host="0.0.0.0", token="s3cret-token").start()
        try:
            base = f"http://127.0.0.1:{server.port}"
            assert server.url.endswith("/?token=s3cret-token")
            for path in ["/", "/api/", "/sessions/demo", "/static/inspector.js"]:
                assert httpx.get(base + path).status_code == 401, path
            assert httpx.get(base + "/?token=wrong").status_code == 401
            assert (
                httpx.get(base + "/", headers={"authorization": "Bearer wrong"}).status_code == 401
            )
            assert (
                httpx.get(
                    base + "/api/", headers={"authorization": "Bearer s3cret-token"}
                ).status_code
                == 200
            )
            with httpx.Client(base_url=base, follow_redirects=False) as client:
                first = client.get("/sessions/demo?token=s3cret-token&from=3")
                assert first.status_code == 303
                assert first.headers["location"] == "/sessions/demo?from=3"
                assert "httponly" in first.headers["set-cookie"].lower()
                assert client.get("/sessions/demo?from=3").status_code == 200
        finally:
            server.stop()


def test_any_session_id_routes_and_is_escaped(tmp_path: Path) -> None:
    path, session, request = hostile_store(tmp_path / "hostile")
    odd = "a/b%2Fc?d#e f"
    with turnlog.open(path) as log:
        log.append(odd, UserMessageAdded(text="odd"))
    with turnlog.open(path, readonly=True) as log:
        server = Server(log).start()
        try:
            timeline = get(server, "/api" + session_href(odd)).json()
            assert timeline["session"] == odd and timeline["events"][0]["text"]["text"] == "odd"
            for page in ["", "summaries", "memories"]:
                html = get(server, session_href(session, page) if page else session_href(session))
                assert html.status_code == 200
                assert "<script>window" not in html.text and "<img src=x" not in html.text
                assert "\x1b" not in html.text and "\\x1b[31m" in html.text, page
            receipt = get(server, session_href(session, "requests", request))
            assert receipt.status_code == 200
            assert "<script>window" not in receipt.text and "\x1b" not in receipt.text
            assert "\\x1b]52;c;" in receipt.text and "\\u202e" in receipt.text
            index = get(server, "/")
            assert quote(HOSTILE_SESSION, safe="") in index.text
            assert "<script>window" not in index.text
        finally:
            server.stop()


@pytest.mark.skipif(not pgserver.available(), reason=pgserver.SKIP_REASON)
def test_a_postgres_store_is_served_without_its_credentials() -> None:
    schema = f"web{os.getpid()}"
    url = pgserver.shared().url(schema=schema).replace("postgres@", "postgres:pw-s3cret@")
    try:
        with turnlog.open(url) as log:
            log.append("pg", [UserMessageAdded(text="hello from postgres")])
        with turnlog.open(url, readonly=True) as log:
            server = Server(log).start()
            try:
                for path in [
                    "/",
                    "/api/",
                    "/sessions/pg",
                    "/api/sessions/pg",
                    "/sessions/pg/events/0",
                    "/api/sessions/pg/summaries",
                ]:
                    response = get(server, path)
                    assert response.status_code == 200, path
                    assert "pw-s3cret" not in response.text, path
                assert get(server, "/api/").json()["sessions"][0]["events"] == 1
            finally:
                server.stop()
    finally:
        from support import drop_schemas

        drop_schemas([schema])


def test_the_serve_command_prints_its_address_and_serves(demo_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "turnlog.tools", "--store", str(demo_path), "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        _check_serve(process)


def _check_serve(process: subprocess.Popen[str]) -> None:
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("turnlog inspector (read-only) on http://127.0.0.1:"), line
        url = line.split(" on ", 1)[1].strip()
        assert "token" not in url
        assert httpx.get(url + "api/", timeout=60).json()["sessions"][0]["session"] == "demo"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_serve_command_on_another_address_prints_a_token(demo_path: Path) -> None:
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "turnlog.tools",
            "--store",
            str(demo_path),
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        _check_token(process)


def _check_token(process: subprocess.Popen[str]) -> None:
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split(" on ", 1)[1].strip()
        assert "/?token=" in url and len(url.split("token=")[1]) >= 32
        port = url.split(":")[2].split("/")[0]
        assert httpx.get(f"http://127.0.0.1:{port}/api/", timeout=60).status_code == 401
        token = url.split("token=")[1]
        assert (
            httpx.get(
                f"http://127.0.0.1:{port}/api/",
                timeout=60,
                headers={"authorization": f"Bearer {token}"},
            ).status_code
            == 200
        )
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_serve_command_refuses_a_missing_store_and_a_bad_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--store", str(tmp_path / "none"), "serve", "--port", "0"]) == 4
    assert "no turnlog store" in capsys.readouterr().err
    assert main(["--store", str(tmp_path / "none"), "serve", "--port", "70000"]) == 2
    assert "--port must be 0 to 65535" in capsys.readouterr().err
