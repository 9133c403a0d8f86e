"""The one-pass validation and the seq splice of ``codec`` against the plain encoding.

``Log.append`` encodes an event once at seq 0 (`encode_event`) and moves it to
its real seq inside the write transaction (`with_seq`); verify skips records
without a ``blob`` key (`may_hold_blob_refs`). Each shortcut must give exactly
what the plain rule gives: the canonical bytes are those of the validated event.
"""

from __future__ import annotations

import msgspec
import pytest
import turnlog
from hypothesis import given
from hypothesis import strategies as st
from support import bodies
from turnlog import Policy
from turnlog._codec import (
    decode_event,
    encode_canonical,
    encode_event,
    may_hold_blob_refs,
    seq_offset,
    with_seq,
)
from turnlog.errors import InvalidEventError
from turnlog.events import (
    AssistantMessageAdded,
    BlobRef,
    Event,
    ImagePart,
    PolicySet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)

session_ids = st.text(
    st.characters(min_codepoint=0x20, exclude_categories=["Cs"]), min_size=1, max_size=256
).filter(lambda s: "\x7f" not in s)
seqs = st.one_of(st.integers(0, 300), st.integers(0, 2**62))


@given(
    session=session_ids,
    seq=seqs,
    body=bodies(big=False),
    time=st.none() | st.integers(-(2**63), 2**63 - 1),
)
def test_with_seq_gives_the_canonical_bytes_at_that_seq(
    session: str, seq: int, body: object, time: int | None
) -> None:
    event = Event(session=session, seq=0, body=body, time=time)  # type: ignore[arg-type]
    checked, data = encode_event(event)
    assert data == encode_canonical(checked)
    at_seq = msgspec.structs.replace(checked, seq=seq)
    assert with_seq(data, seq_offset(session), seq) == encode_canonical(at_seq)


@pytest.mark.parametrize(
    "body",
    [
        PolicySet(policy=Policy(cache_read_price=1, input_price=2)),  # ints for float fields
        AssistantMessageAdded(parts=[TextPart(text="a")]),  # type: ignore[arg-type]
        AssistantMessageAdded(parts=({"type": "text", "text": "a"},)),  # type: ignore[arg-type]
        AssistantMessageAdded(parts=(ToolCall(id="c", name="n", arguments="{" + "}"),)),
        UserMessageAdded(
            text="a",
            images=(
                ImagePart(
                    media_type="image/png",
                    blob=BlobRef(
                        hash="0" * 64, size=1, media_type="text/plain; " + "charset=utf-8"
                    ),
                ),
            ),
        ),
    ],
    ids=[
        "int-for-float",
        "list-for-tuple",
        "dict-for-struct",
        "default-by-value",
        "nested-default-by-value",
    ],
)
def test_encode_event_bytes_do_not_depend_on_how_the_event_was_built(body: object) -> None:
    checked, data = encode_event(Event(session="s", seq=0, body=body))  # type: ignore[arg-type]
    assert data == encode_canonical(checked)
    assert encode_canonical(decode_event(data)) == data


def test_encode_event_rejects_what_the_schema_rejects() -> None:
    with pytest.raises(InvalidEventError):
        encode_event(Event(session="s", seq=0, body=UserMessageAdded(text=5)))  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match="UTF-8"):
        encode_event(Event(session="s", seq=0, body=UserMessageAdded(text="\ud800")))
    with pytest.raises(InvalidEventError):
        encode_event(Event(session="s", seq=0, body=UserMessageAdded(text="a"), time=2**64))


@given(body=bodies(big=False), seq=seqs)
def test_a_record_without_a_blob_key_holds_no_blob_ref(body: object, seq: int) -> None:
    ref = BlobRef(hash="a" * 64, size=3)
    for payload in (
        body,
        ToolResultAdded(call_id="c", tool_name="t", output="x", blob=ref),
        UserMessageAdded(text="x", images=(ImagePart(media_type="i", blob=ref),)),
    ):
        data = encode_canonical(Event(session="s", seq=seq, body=payload))  # type: ignore[arg-type]
        refs = turnlog._verify._blob_refs(decode_event(data).body)
        assert may_hold_blob_refs(data) or not refs
