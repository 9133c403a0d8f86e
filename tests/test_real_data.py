"""The real-data check runs over the whole shared corpus (see tests/bench/real_data.py)."""

from __future__ import annotations

import pytest

from tests.bench import real_data


def test_every_corpus_transcript_imports_packs_renders_and_replays() -> None:
    if not real_data.CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    assert real_data.main([]) == 0
