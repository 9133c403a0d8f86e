"""The real-data check over the shared corpus (see tests/bench/real_data.py): every pack at
4k to 128k in every format succeeds (or is refused below the floor, under 8k only), passes
every checker and the SDK request types, and replays byte for byte. The default run checks
the representative files of ``real_data.SAMPLE``; the whole corpus is a slow test."""

from __future__ import annotations

import pytest

from tests.bench import real_data


def test_the_representative_corpus_transcripts_pack_render_and_replay() -> None:
    if not real_data.CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    assert real_data.main(["--sample"]) == 0


@pytest.mark.slow
def test_every_corpus_transcript_imports_packs_renders_and_replays() -> None:
    if not real_data.CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    assert real_data.main([]) == 0
