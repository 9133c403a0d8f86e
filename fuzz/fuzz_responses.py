"""Fuzz provider reply parsing: bodies, SSE streams, HTTP answers and error bodies.

The first byte picks the format (OpenAI chat, OpenAI Responses, Anthropic) and
the entry point; the rest is the body. Contract: ``parse_response``,
``parse_stream`` and ``parse_http`` return a `Reply` or raise ``DecodeError``;
``parse_error`` never raises. Whatever is returned can be appended to a log as
it is (the events fit the schema), and parsing is deterministic.

    python fuzz/fuzz_responses.py /tmp/work-responses fuzz/corpus/responses \\
        -max_total_time=600
"""

from __future__ import annotations

import sys

from _harness import instrumented, main

with instrumented(__name__ == "__main__"):
    import turnlog
    from turnlog.adapters.providers import (
        PROVIDERS,
        Reply,
        parse_error,
        parse_http,
        parse_response,
        parse_stream,
    )
    from turnlog.errors import DecodeError
    from turnlog.events import ProviderErrorReceived

_STATUSES = (200, 200, 400, 413, 429, 500, 529, 201)


def _appendable(reply: Reply) -> None:
    bodies = reply.bodies()
    if not bodies:
        return
    log = turnlog.open(":memory:")
    log.append("r", list(bodies))  # must not raise: parsed events fit the schema
    if not log.verify().ok:
        raise AssertionError("an appended reply does not verify")


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    selector, body = data[0], data[1:]
    fmt = sorted(PROVIDERS)[selector % 3]
    entry = (selector // 3) % 4
    try:
        if entry == 0:
            reply = parse_response(fmt, body, request_seq=1)
        elif entry == 1:
            reply = parse_stream(fmt, body, request_seq=1)
        elif entry == 2:
            status = _STATUSES[(selector // 12) % len(_STATUSES)]
            reply = parse_http(fmt, status, body, request_seq=1)
        else:
            reply = None
    except DecodeError:
        reply = None
    if reply is not None:
        _appendable(reply)
        again = (
            (parse_response, parse_stream)[entry](fmt, body, request_seq=1)
            if entry < 2
            else parse_http(fmt, _STATUSES[(selector // 12) % len(_STATUSES)], body, request_seq=1)
        )
        if again != reply:
            raise AssertionError("parsing the same bytes twice gives different replies")
    status = None if selector & 0x80 else _STATUSES[(selector // 12) % len(_STATUSES)]
    error = parse_error(status, body)
    if not isinstance(error, ProviderErrorReceived):
        raise AssertionError("parse_error returned something else")
    _appendable(Reply(error=error))
    # Text and line-list forms of a stream parse like the bytes (or fail alike).
    if entry == 1:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return
        try:
            as_text: Reply | None = parse_stream(fmt, text, request_seq=1)
        except DecodeError:
            as_text = None
        if as_text != reply:
            raise AssertionError("a stream parses differently as str and as bytes")


if __name__ == "__main__":
    main(TestOneInput, "responses")
    sys.exit(0)
