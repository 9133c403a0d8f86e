"""The inspector in a real browser: headless Chromium driven by playwright.

Chromium is Debian's (``apt-get install chromium``), run through playwright's Python
package with ``executable_path``; no browser is downloaded. Without either, these
tests skip with one line saying how to get them. ``.ci/run`` installs Chromium.

Set ``TURNLOG_SCREENSHOTS=DIR`` to keep the screenshots (docs/inspector.md shows
the ones in docs/inspector/).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the web extra: pip install 'turnlog[web]'")

import turnlog
from turnlog.tools.web import Server
from turnlog.tools.web._inspector import session_href
from web_support import HOSTILE, TRANSCRIPT, corpus_store, demo_store, hostile_store

CHROMIUM = (
    os.environ.get("TURNLOG_CHROMIUM")
    or shutil.which("chromium")
    or shutil.which("chromium-browser")
)
try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or sync_playwright is None,
    reason="no headless Chromium: apt-get install chromium, and pip install -e '.[test]' "
    "for playwright",
)

SHOTS = os.environ.get("TURNLOG_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser
        browser.close()


class Watched:
    """A page with its console errors, uncaught exceptions and dialogs recorded."""

    def __init__(self, browser: Browser, *, width: int = 1280, height: int = 800) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.page: Page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

        def dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", dialog)

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def watched(browser: Browser) -> Iterator[Watched]:
    w = Watched(browser)
    yield w
    w.close()


def serve(path: Path) -> Iterator[Server]:
    with turnlog.open(path, readonly=True) as log:
        server = Server(log).start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Server]:
    yield from serve(demo_store(tmp_path))


def shot(page: Page, tmp_path: Path, name: str, *, full: bool = False) -> None:
    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=full)
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=full)


def test_every_page_opens_on_the_demo_store(demo: Server, watched: Watched, tmp_path: Path) -> None:
    page = watched.page
    for name, path, heading in [
        ("sessions", "/", "Sessions"),
        ("timeline", "/sessions/demo", "demo"),
        ("receipt", "/sessions/demo/requests/427", "Request #427"),
        ("diff", "/sessions/demo/diff/406/427", "Request #406 → #427"),
        ("summaries", "/sessions/demo/summaries", "demo"),
        ("memories", "/sessions/demo/memories?q=decimal", "demo"),
        ("event", "/sessions/demo/events/9", "demo #9"),
    ]:
        response = page.goto(demo.base + path)
        assert response is not None and response.status == 200, path
        assert page.locator("h1").first.inner_text().startswith(heading), path
        shot(page, tmp_path, name)
    assert watched.errors == [] and watched.dialogs == []


def test_click_through_a_receipt_its_replay_a_diff_and_the_summaries(
    demo: Server, watched: Watched, tmp_path: Path
) -> None:
    page = watched.page
    page.goto(demo.base + "/")
    page.get_by_role("link", name="demo", exact=True).click()
    page.wait_for_url("**/sessions/demo")
    page.locator("#events a", has_text="receipt").last.click()
    page.wait_for_url("**/sessions/demo/requests/*")
    assert page.locator("#messages .msg").count() > 10
    assert page.locator("#budget rect").count() >= 5
    assert page.locator("#budget line").count() == 3  # warning, compact, blocking
    page.locator("#replay").click()
    expect(page.locator("#replay-result")).to_have_text(re.compile("^identical"), timeout=60_000)
    page.locator("#body summary").click()
    expect(page.locator("#body-text")).to_have_text(re.compile(r"^\{"), timeout=60_000)
    page.locator("#body summary").click()
    shot(page, tmp_path, "receipt-replayed")
    page.locator("#decision-filter a", has_text="summarized").click()
    page.wait_for_url("**decision=summarized**")
    decisions = page.locator("#decisions tbody tr")
    assert decisions.count() > 0
    assert set(page.locator("#decisions tbody .badge.d-summarized").all_inner_texts()) == {
        "summarized"
    }
    assert page.locator("#decisions tbody .d-verbatim").count() == 0
    page.locator("#prefix a", has_text="diff").click()
    page.wait_for_url("**/diff/**")
    assert "messages" in page.locator("#shared").inner_text()
    page.locator("header .crumb").first.click()
    page.locator("nav.tabs a", has_text="summaries").click()
    page.wait_for_url("**/summaries")
    assert page.locator("#tree li").count() > 0
    page.locator("#tree summary").first.click()
    assert page.locator("#tree pre").first.is_visible()
    shot(page, tmp_path, "summaries-open")
    assert watched.errors == [] and watched.dialogs == []


@pytest.mark.skipif(not TRANSCRIPT.is_file(), reason="shared corpus not present")
def test_an_imported_corpus_transcript_opens_on_every_page(
    watched: Watched, tmp_path: Path
) -> None:
    path, session, request = corpus_store(tmp_path / "corpus")
    for server in serve(path):
        page = watched.page
        for target in [
            "/",
            session_href(session),
            session_href(session, "events", 3),
            session_href(session, "requests", request),
            session_href(session, "summaries"),
            session_href(session, "memories"),
        ]:
            response = page.goto(server.base + target)
            assert response is not None and response.status == 200, target
        page.goto(server.base + session_href(session, "requests", request))
        assert "anthropic" in page.locator("h2", has_text="Request body").inner_text()
        page.locator("#body summary").click()
        expect(page.locator("#body-text")).to_contain_text('"max_tokens": 2000', timeout=60_000)
        page.locator("#replay").click()
        expect(page.locator("#replay-result")).to_have_text(
            re.compile("^identical"), timeout=60_000
        )
        shot(page, tmp_path, "corpus-receipt")
        page.goto(server.base + session_href(session) + "?from=0")
        assert page.locator("#events tbody tr").count() > 20
        shot(page, tmp_path, "corpus-timeline")
    assert watched.errors == [] and watched.dialogs == []


def test_hostile_content_runs_nothing_in_any_page(watched: Watched, tmp_path: Path) -> None:
    path, session, request = hostile_store(tmp_path / "hostile")
    for server in serve(path):
        page = watched.page
        pages = [
            "/",
            "/?q=%3Cscript",
            session_href(session),
            *(session_href(session, "events", seq) for seq in range(12)),
            session_href(session, "requests", request),
            session_href(session, "requests", request) + "?decision=verbatim",
            session_href(session, "diff", 10, request),
            session_href(session, "summaries"),
            session_href(session, "memories") + "?q=script",
            session_href(f"{session}-memories"),
        ]
        for target in pages:
            response = page.goto(server.base + target)
            assert response is not None and response.status == 200, target
            for summary in page.locator("details > summary").all()[:30]:
                summary.click()  # open every folded text too
            assert page.evaluate("window.pwned") is None, target
            assert page.locator("[onerror], [onload], [onclick]").count() == 0, target
            assert page.locator("a[href^='javascript:' i]").count() == 0, target
            assert (
                page.locator(
                    "main script, main img, main svg:not(.bar):not(.tokbar), main iframe, main b b"
                ).count()
                == 0
            ), target
            scripts = page.evaluate("Array.from(document.scripts).map(s => s.src)")
            assert scripts == [server.base + "/static/inspector.js"], target
            text = page.locator("main").inner_text()
            assert "\x1b" not in text and "\u202e" not in text, target
        page.goto(server.base + session_href(session, "requests", request))
        assert "\\x1b[31m" in page.locator("#messages").inner_text()
        assert "<script>" in page.locator("#messages").inner_text()  # shown as text
        page.locator("#replay").click()
        expect(page.locator("#replay-result")).to_have_text(
            re.compile("^identical"), timeout=60_000
        )
        assert page.evaluate("window.pwned") is None
        shot(page, tmp_path, "hostile-receipt")
    assert watched.dialogs == []
    assert watched.errors == []  # nothing injected even tried to run (CSP reports none)


def test_the_replay_button_names_the_first_difference(watched: Watched, tmp_path: Path) -> None:
    import msgspec

    path = tmp_path / "differs"
    with turnlog.open(path) as log:
        log.append("d", [turnlog.events.UserMessageAdded(text="hello")])
        replayer = turnlog.Replayer(turnlog.Packer(log))
        real = replayer.record("d", policy=turnlog.Policy(context_window=8000, output_reserve=1000))
        body = log.get("d", real.request_seq).body
        assert isinstance(body, turnlog.events.RequestIssued)
        forged = msgspec.structs.replace(
            body, prompt_hash="0" * 64, digests=bytes(8) + body.digests[8:]
        )
        seq = log.append("d", forged).last_seq
    for server in serve(path):
        page = watched.page
        page.goto(server.base + f"/sessions/d/requests/{seq}")
        page.locator("#replay").click()
        expect(page.locator("#replay-result")).to_have_text(
            re.compile("^DIFFERS: first difference at"), timeout=60_000
        )
        page.goto(server.base + "/sessions/d")
        page.locator("#kind-filter a", has_text="request").click()
        page.wait_for_url("**kind=request**")
        assert page.locator("#events tbody tr").count() == 2
    assert watched.errors == []


def test_the_live_timeline_shows_an_appended_event(watched: Watched, tmp_path: Path) -> None:
    path = tmp_path / "live"
    with turnlog.open(path) as log:
        log.append("live", [turnlog.events.UserMessageAdded(text=f"m{i}") for i in range(5)])
    for server in serve(path):
        page = watched.page
        page.goto(server.base + "/sessions/live")
        page.wait_for_selector("#live.on")
        assert page.locator("#events tbody tr").count() == 5
        # Another process appends, as an agent would while the inspector is open.
        code = (
            "import sys, turnlog; log = turnlog.open(sys.argv[1]); "
            "log.append('live', turnlog.events.UserMessageAdded(text=sys.argv[2]))"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(path), "\x1b[31m<b>appended</b> " + HOSTILE],
            check=True,
            timeout=60,
        )
        row = page.wait_for_selector("#e5", timeout=30_000)
        assert row is not None and "\\x1b[31m<b>appended</b> <script>" in row.inner_text()
        assert "\x1b" not in row.inner_text()
        assert page.locator("#events tbody tr").count() == 6
        assert page.locator("#events b, #events img, #events script").count() == 0
        assert page.evaluate("window.pwned") is None
        assert "#5" in page.locator("#live").inner_text()
    assert watched.errors == []
