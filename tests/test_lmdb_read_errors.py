"""Errors raised by the caller inside a snapshot are the caller's, not the store's."""

from __future__ import annotations

from pathlib import Path

import pytest
import turnlog
from turnlog.events import UserMessageAdded


def test_a_callers_error_inside_a_snapshot_passes_through_unchanged(tmp_path: Path) -> None:
    log = turnlog.open(tmp_path / "store")
    log.append("s", UserMessageAdded(text="hi"))
    with pytest.raises(BrokenPipeError), log.snapshot() as snap:
        snap.read("s")
        raise BrokenPipeError("stdout closed")
    with pytest.raises(KeyError), log.snapshot():
        raise KeyError("mine")
    assert log.read("s")[0].body == UserMessageAdded(text="hi")
    log.close()
