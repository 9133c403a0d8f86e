"""Old records replay for ever: every golden store verifies and replays byte for byte.

Each folder ``tests/golden/vX.Y.Z/`` holds a store written by that release (see
``tests/golden/make_golden.py``): the demo, corpus imports, requests recorded in every
format at several budgets, compactions and an overflow recovery. The current code must
verify each store and reproduce every recorded request, neutral prompt and rendered
body alike. A golden store is never regenerated; a rule change that breaks this test
must become a new policy field or rules version instead.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import turnlog
from turnlog import Packer, Replayer
from turnlog.adapters.providers import renderer_for

GOLDEN = Path(__file__).parent / "golden"
STORES = sorted(p for p in GOLDEN.iterdir() if (p / "store" / "data.mdb").is_file())


@pytest.fixture(params=STORES, ids=[p.name for p in STORES])
def golden(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, turnlog.Log]]:
    folder: Path = request.param
    copy = tmp_path / "store"
    shutil.copytree(folder / "store", copy)  # LMDB writes a lock file beside the data
    log = turnlog.open(copy, readonly=True)
    try:
        yield folder, log
    finally:
        log.close()


def test_there_is_a_golden_store_of_the_current_release() -> None:
    assert (GOLDEN / f"v{turnlog.__version__}" / "store" / "data.mdb").is_file()


def test_golden_store_verifies(golden: tuple[Path, turnlog.Log]) -> None:
    _, log = golden
    report = log.verify()
    assert report.ok, report


def test_every_golden_request_replays_byte_for_byte(golden: tuple[Path, turnlog.Log]) -> None:
    folder, log = golden
    manifest = json.loads((folder / "manifest.json").read_text())
    packer = Packer(log)
    replayer = Replayer(packer)
    formats: set[str] = set()
    replayed = erased = 0
    for head in log.sessions():
        for event in log.read(head.session, kinds=["request"]):
            request = event.body
            assert isinstance(request, turnlog.events.RequestIssued)
            render = renderer_for(request, blobs=log.blob)
            result = replayer.replay(head.session, event.seq, render=render)
            if not result.ok and _erased_before(manifest, head.session, event.seq, log):
                assert result.erased_by is not None, (head.session, event.seq, result.difference)
                erased += 1
                continue
            assert result.ok, (head.session, event.seq, result.difference)
            formats.add(request.format)
            replayed += 1
    expected = sum(
        1 for packs in manifest["packs"].values() for p in packs if p["outcome"] == "recorded"
    )
    assert replayed + erased >= expected + 40  # the demo's requests and the recorded packs
    assert ("erased" in manifest) == (erased > 0)  # (since 0.3.0: requests that held it)
    assert formats == set(manifest["formats"])


def test_every_golden_session_replays_in_one_pass(golden: tuple[Path, turnlog.Log]) -> None:
    # What `turnlog replay SESSION --all` does: one Packer, one fold of each lineage.
    folder, log = golden
    packer = Packer(log)
    replayer = Replayer(packer)
    for head in log.sessions():
        seqs = [e.seq for e in log.read(head.session, kinds=["request"])]
        results = list(
            replayer.replay_all(
                head.session, render=lambda request: renderer_for(request, blobs=log.blob)
            )
        )
        assert [r.request_seq for r in results] == seqs
        manifest = json.loads((folder / "manifest.json").read_text())
        failed = [
            (r.request_seq, r.difference)
            for r in results
            if not r.ok
            and not (
                r.erased_by is not None
                and _erased_before(manifest, head.session, r.request_seq, log)
            )
        ]
        assert not failed, failed


def _erased_before(manifest: dict[str, object], session: str, seq: int, log: turnlog.Log) -> bool:
    """Whether the request at ``seq`` was recorded, before the golden store's erasure, in
    the session it erased (such a request held the erased content: it replays as erased)."""
    erased = manifest.get("erased")
    if not isinstance(erased, dict) or erased["session"] != session:
        return False
    erasures = [e.seq for e in log.read(session, kinds=["erasure"])]
    return bool(erasures) and seq < erasures[0]
