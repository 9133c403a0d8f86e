"""Text for a terminal: control characters in logged data are shown, never obeyed.

A log holds whatever a model, a tool or a user produced, and tool output is
full of escape sequences: colour codes, but also OSC 52 clipboard writes,
title changes, screen clears and cursor moves that could overwrite a printed
line with a forged ``verify: ok``. Bidi overrides reorder what is shown, and C1
controls (U+0080-U+009F) act as escapes on some terminals. The command's human
output therefore shows each such character as a visible escape (``\\x1b``,
``\\u202e``); only newline and tab keep their meaning. JSON output is left to
the JSON encoder, which escapes C0 controls.
"""

from __future__ import annotations

from typing import IO

__all__ = ["EscapingWriter", "visible"]

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_LINE_SEPARATORS = (0x2028, 0x2029)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE = {code: _escape(code) for code in (
    *(c for c in range(0x20) if c not in (0x09, 0x0A)), 0x7F, *range(0x80, 0xA0),
    *_BIDI, *_LINE_SEPARATORS)}
_ALL = {**_TABLE, 0x0A: "\\n"}


def visible(text: str, *, newlines: bool = True) -> str:
    """``text`` with every control, C1 and bidi-control character shown as an escape.

    Parameters:
        text: any text.
        newlines: keep ``\\n`` as a line break (False escapes it too, for one-line
            fields). Tab is always kept.

    Returns:
        Text that moves the cursor only by printing characters and line breaks.
    """
    return text.translate(_TABLE if newlines else _ALL)


class EscapingWriter:
    """A text stream that passes everything written through `visible`.

    The command wraps stdout and stderr in one for its human output, so that no
    message, table or error line can carry a terminal escape from the data.
    """

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def buffer(self) -> object:
        """The underlying binary buffer (raw bytes: ``blob``, ``export``)."""
        return self._stream.buffer  # type: ignore[attr-defined]

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", "utf-8") or "utf-8"
