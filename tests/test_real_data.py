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


def test_the_representative_transcripts_pack_with_tool_traffic_clipped_harder() -> None:
    """The cache-first setting (docs/packing.md) in every format at every window: tool
    results and calls clipped to 5% of the history budget, the low watermark at 0.7."""
    if not real_data.CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    fields = ["--set", "tool_clip_ratio=0.05", "--set", "trim_low_ratio=0.7"]
    assert real_data.main(["--sample", *fields]) == 0


@pytest.mark.slow
def test_every_corpus_transcript_imports_packs_renders_and_replays() -> None:
    if not real_data.CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    assert real_data.main([]) == 0
