"""Fuzz the event codec: decode_event, decode_body, event_from_json, check_record.

Contract: every decoder returns a value or raises ``DecodeError`` (a
``KernelError``); ``check_record`` never raises, it returns a reason. Anything
that decodes round-trips: re-encoding it canonically gives bytes that decode
to an equal event, encode to themselves again, and verify as a chained record;
an exported JSON line that parses is exported and parsed back to an equal
event; a decoded payload appended to a log is accepted or refused with a
``KernelError``, and once accepted the log verifies.

    python fuzz/fuzz_codec.py /tmp/work-codec fuzz/corpus/codec -max_total_time=600
    python fuzz/fuzz_codec.py --replay            # run the seed corpus once
"""

from __future__ import annotations

import contextlib
import sys

from _harness import instrumented, main

with instrumented(__name__ == "__main__"):
    import msgspec
    import turnlog
    from turnlog import KernelError
    from turnlog._canonical import normalize
    from turnlog._chain import GENESIS, check_record, link, pack_record, record_event
    from turnlog._codec import (
        decode_body,
        decode_event,
        encode_canonical,
        event_from_json,
        event_to_json,
    )
    from turnlog.errors import DecodeError
    from turnlog.events import Event


_DETERMINISTIC = msgspec.msgpack.Encoder(order="deterministic")


def _same(a: object, b: object) -> bool:
    """Equal as values (NaN-safe, map order ignored: compare deterministic encodings)."""
    return bool(_DETERMINISTIC.encode(a) == _DETERMINISTIC.encode(b))


def _roundtrip_event(event: Event) -> None:
    normalize(event)
    try:
        canonical = encode_canonical(event)
    except (TypeError, OverflowError, UnicodeEncodeError) as exc:
        raise AssertionError(f"a decoded event does not re-encode: {exc!r}") from exc
    again = decode_event(canonical)  # must decode: DecodeError here is a finding
    normalize(again)
    if encode_canonical(again) != canonical:
        raise AssertionError("canonical bytes are not a fixed point of decode/encode")
    if not _same(again, event):
        raise AssertionError("re-decoded event differs from the decoded one")
    digest = link(GENESIS, canonical)
    record = pack_record(GENESIS, digest, canonical)
    checked, reason = check_record(record, session=event.session, seq=event.seq, prev=GENESIS)
    if reason is not None or checked is None:
        raise AssertionError(f"a canonical record does not verify: {reason}")
    if record_event(record).hash != digest:
        raise AssertionError("record_event lost the hash")


def _append_body(event: Event) -> None:
    log = turnlog.open(":memory:")
    draft = turnlog.Draft(
        body=event.body, time=event.time, key=event.key, causation=event.causation, meta=event.meta
    )
    try:
        log.append("fuzz", [draft])
    except KernelError:
        return
    report = log.verify()
    # A decoded payload may carry a BlobRef to a blob this log never stored; verify
    # must then name that blob, anything else is a finding.
    if not report.ok and (report.problem is None or report.problem.blob is None):
        raise AssertionError(f"an accepted event does not verify: {report.problem}")
    stored = log.get("fuzz", 0)
    if not _same(stored.body, event.body) and getattr(stored.body, "blob", None) is None:
        raise AssertionError("the stored payload differs from the appended one")


def TestOneInput(data: bytes) -> None:
    # 1. msgpack event bytes
    try:
        event = decode_event(data)
    except DecodeError:
        event = None
    if event is not None:
        _roundtrip_event(event)
        _append_body(event)
        if encode_canonical(event) == data:  # canonical input: the record checks as is
            rec = pack_record(GENESIS, link(GENESIS, data), data)
            if check_record(rec, session=event.session, seq=event.seq, prev=None)[1]:
                raise AssertionError("canonical input does not check")
    # 2. one payload
    try:
        body = decode_body(data)
    except DecodeError:
        body = None
    if body is not None:
        _roundtrip_event(Event(session="fuzz", seq=0, body=body))
    # 3. export lines
    try:
        exported = event_from_json(data)
    except DecodeError:
        exported = None
    if exported is not None:
        line = event_to_json(exported)
        back = event_from_json(line)
        if back != exported:
            raise AssertionError("an exported event does not parse back equal")
    # 4. the bytes as a stored record: never raises, reports a reason or the event
    for prev in (None, GENESIS):
        ev, reason = check_record(data, session="fuzz", seq=0, prev=prev)
        if reason is None and ev is None:
            raise AssertionError("check_record returned neither event nor reason")
    with contextlib.suppress(DecodeError):
        record_event(data)


if __name__ == "__main__":
    main(TestOneInput, "codec")
    sys.exit(0)
