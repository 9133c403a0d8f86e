"""Checking the arguments of a call the way turnlog checks its own.

Every public entry point of turnlog and its adapters checks its arguments with these
functions, and an extension (a store backend, a packing stage, a provider, an
importer) can too, so that a bad argument is refused the same way everywhere: with
`turnlog.errors.InvalidArgumentError` (or a subclass passed as ``error``) and one
wording, ``{name} must be {expected}, found {value}[; {hint}]``. A ``bool`` is
never an integer or a number, nor is NaN or an infinity.

    from turnlog.validation import check_integer

    check_integer(limit, "limit", min_value=1, optional=True)
    # limit=True raises: limit must be None or an int >= 1, found True (type bool)
"""

from __future__ import annotations

from ._validation import (
    check_integer,
    check_number,
    check_text,
    check_type,
    invalid,
    refuse_unknown_options,
)

__all__ = [
    "check_integer",
    "check_number",
    "check_text",
    "check_type",
    "invalid",
    "refuse_unknown_options",
]
