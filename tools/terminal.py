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

from collections.abc import Iterable, Sequence
from typing import IO, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "Column",
    "EscapingWriter",
    "cell",
    "make_console",
    "raw_stream",
    "print_table",
    "visible",
]

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_LINE_SEPARATORS = (0x2028, 0x2029)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE = {
    code: _escape(code)
    for code in (
        *(c for c in range(0x20) if c not in (0x09, 0x0A)),
        0x7F,
        *range(0x80, 0xA0),
        *_BIDI,
        *_LINE_SEPARATORS,
    )
}
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
    def raw(self) -> IO[str]:
        """The wrapped stream (for output whose escapes are the command's own: colour)."""
        return self._stream

    @property
    def buffer(self) -> object:
        """The underlying binary buffer (raw bytes: ``blob``, ``export``)."""
        return self._stream.buffer  # type: ignore[attr-defined]

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", "utf-8") or "utf-8"


# -- tables and colour ------------------------------------------------------------------
#: A table column: its header and its alignment.
Column = tuple[str, Literal["left", "right"]]


def raw_stream(stream: IO[str] | EscapingWriter) -> IO[str]:
    """The stream under an `EscapingWriter` (or ``stream`` itself)."""
    return stream.raw if isinstance(stream, EscapingWriter) else stream


def make_console(stream: IO[str] | EscapingWriter) -> Console:
    """A rich console writing to ``stream``: colour only on a terminal, and never with
    ``NO_COLOR`` set (rich reads it); no markup, highlighting or emoji codes, so text
    is printed as given; no wrapping when the output is a pipe or a file."""
    raw = raw_stream(stream)
    tty = raw.isatty()
    return Console(
        file=raw,
        markup=False,
        highlight=False,
        emoji=False,
        width=None if tty else 100_000,
        soft_wrap=not tty,
        color_system="auto" if tty else None,
    )


def cell(value: object, style: str = "") -> Text:
    """One table cell or line of text: ``value`` as text with control characters
    shown as escapes, in ``style`` (a rich style name, ``""`` for none)."""
    return Text(visible(str(value), newlines=False), style=style)


def print_table(
    console: Console, columns: Sequence[Column], rows: Iterable[Sequence[object]]
) -> None:
    """Print rows under a header line, columns aligned (two spaces apart).

    Cells that are not `Text` go through `cell`. On a pipe the lines carry no
    trailing blanks, so the output stays easy to grep and to compare.
    """
    table = Table(
        box=None,
        pad_edge=False,
        padding=(0, 2, 0, 0),
        show_edge=False,
        header_style="bold",
        collapse_padding=True,
    )
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=not console.is_terminal)
    for row in rows:
        table.add_row(*(value if isinstance(value, Text) else cell(value) for value in row))
    if console.is_terminal:
        console.print(table)
        return
    with console.capture() as captured:
        console.print(table)
    lines = captured.get().split("\n")
    console.file.write("\n".join(line.rstrip() for line in lines).rstrip("\n") + "\n")
