"""One vocabulary for checking the arguments of public calls.

Theory of operation
-------------------
Every public entry point checks its arguments through these functions before it
does anything else, so that a bad argument is refused the same way everywhere:
with `InvalidArgumentError` and one wording. Where callers are documented to
catch a more specific class, the check names it as ``error``: `PolicyError` (an
`InvalidArgumentError`) for a policy field, `InvalidEventError` (one too) for a
field of an event being appended, `TokenizerError` for a tokenizer id read back
from a request record, whose replay reports it. The wording is the same:

    {name} must be {what is expected}, found {what was given}[; {what to do}]

where what was given is the value's ``repr`` (shortened) and, when the type is
what is wrong, its type. ``bool`` is never an integer or a number here, although
Python makes it a subclass of ``int``: ``timeout=True`` is a mistake, not one
second. NaN and the infinities are never numbers either.

The checks return nothing: they raise or they pass, so a call reads as a list of
its preconditions (hypothesis' ``check_type`` and ``check_valid_integer`` are the
model).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
from collections.abc import Awaitable, Callable
from typing import NoReturn, ParamSpec, TypeVar, cast

from ._errors import InvalidArgumentError, KernelError

__all__ = [
    "check_integer",
    "check_number",
    "check_text",
    "check_type",
    "invalid",
    "refuse_unknown_options",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: The longest ``repr`` of a refused value a message quotes.
_SHOWN = 80


def shown(value: object, *, with_type: bool = False) -> str:
    """``value`` as a message quotes it: its ``repr``, shortened, and its type if asked."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not hide the real error
        text = f"<{type(value).__name__} object>"
    if len(text) > _SHOWN:
        text = text[: _SHOWN - 3] + "..."
    if with_type and not text.startswith(type(value).__name__ + "("):
        return f"{text} (type {type(value).__name__})"
    return text


def invalid(
    name: str,
    expected: str,
    value: object,
    *,
    hint: str = "",
    with_type: bool = False,
    error: type[KernelError] = InvalidArgumentError,
) -> NoReturn:
    """Raise ``error`` saying that ``name`` must be ``expected`` and was ``value``."""
    message = f"{name} must be {expected}, found {shown(value, with_type=with_type)}"
    raise error(f"{message}; {hint}" if hint else message)


def check_type(
    value: object,
    expected: type | tuple[type, ...],
    name: str,
    *,
    what: str | None = None,
    hint: str = "",
    error: type[KernelError] = InvalidArgumentError,
) -> None:
    """``value`` is an instance of ``expected`` (never a ``bool`` standing in for an int).

    Parameters:
        what: how the message names the expected type (default: the type's name).
    """
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return
    if what is None:
        what = " or ".join(_a(t.__name__) for t in types)
    invalid(name, what, value, hint=hint, with_type=True, error=error)


def check_integer(
    value: object,
    name: str,
    *,
    min_value: int | None = None,
    max_value: int | None = None,
    optional: bool = False,
    hint: str = "",
    error: type[KernelError] = InvalidArgumentError,
) -> None:
    """``value`` is an ``int`` (not a ``bool``) from ``min_value`` to ``max_value``,
    or ``None`` when ``optional``."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        invalid(
            name,
            _expected("an int", min_value, max_value, optional),
            value,
            hint=hint,
            with_type=True,
            error=error,
        )
    if (min_value is not None and value < min_value) or (
        max_value is not None and value > max_value
    ):
        invalid(
            name, _expected("an int", min_value, max_value, optional), value, hint=hint, error=error
        )


def check_number(
    value: object,
    name: str,
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    exclusive_min: bool = False,
    optional: bool = False,
    hint: str = "",
    error: type[KernelError] = InvalidArgumentError,
) -> None:
    """``value`` is a finite ``int`` or ``float`` (not a ``bool``) from ``min_value``
    (above it when ``exclusive_min``) to ``max_value``, or ``None`` when ``optional``."""
    if optional and value is None:
        return
    expected = _expected(
        "a finite number", min_value, max_value, optional, exclusive_min=exclusive_min
    )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        invalid(name, expected, value, hint=hint, with_type=True, error=error)
    if (
        not math.isfinite(value)
        or (min_value is not None and (value <= min_value if exclusive_min else value < min_value))
        or (max_value is not None and value > max_value)
    ):
        invalid(name, expected, value, hint=hint, error=error)


def check_text(
    value: object,
    name: str,
    *,
    max_chars: int | None = None,
    what: str | None = None,
    hint: str = "",
    error: type[KernelError] = InvalidArgumentError,
) -> None:
    """``value`` is a non-empty ``str`` of at most ``max_chars`` characters."""
    if what is None:
        what = "a non-empty str" if max_chars is None else f"a str of 1 to {max_chars} characters"
    if not isinstance(value, str):
        invalid(name, what, value, hint=hint, with_type=True, error=error)
    if not value or (max_chars is not None and len(value) > max_chars):
        invalid(name, what, value, hint=hint, error=error)


def refuse_unknown_options(
    what: str, *, usage: str | None = None, error: type[KernelError] = InvalidArgumentError
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorate a function (or ``__init__``) so that a misspelled keyword argument, one
    positional argument too many or a required argument left out raises ``error``
    naming it (with the closest option and every option, or the call written out),
    where Python raises a bare ``TypeError``.

    Parameters:
        what: how the message names the call, e.g. ``"turnlog.open()"``.
        usage: the call written out with its required arguments, as a message about a
            missing one shows it, e.g. ``'turnlog.open("./agent-store")'``; by
            default the names of the required arguments, e.g. ``turnlog.open(path)``.
        error: the class raised (an `InvalidArgumentError` by default).
    """

    def decorate(function: Callable[_P, _R]) -> Callable[_P, _R]:
        parameters = list(inspect.signature(function).parameters.values())
        kinds = inspect.Parameter
        if any(p.kind is kinds.VAR_KEYWORD for p in parameters):
            return function
        named = {p.name for p in parameters if p.kind is not kinds.POSITIONAL_ONLY}
        options = [p.name for p in parameters if p.kind is kinds.KEYWORD_ONLY]
        positional = [
            p.name
            for p in parameters
            if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
        ]
        counted = positional[1:] if positional[:1] == ["self"] else positional
        spread = any(p.kind is kinds.VAR_POSITIONAL for p in parameters)
        # (index among the positional arguments, name) of each required one, and the
        # names of the required keyword-only ones.
        needed = [
            (index, p.name)
            for index, p in enumerate(parameters)
            if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
            and p.default is p.empty
            and p.name != "self"
        ]
        needed_by_name = [
            p.name for p in parameters if p.kind is kinds.KEYWORD_ONLY and p.default is p.empty
        ]
        if usage is None:
            written = [name for _, name in needed] + [f"{name}=..." for name in needed_by_name]
            shown_usage = f"{what.removesuffix('()')}({', '.join(written)})"
        else:
            shown_usage = usage

        def check(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
            for key in kwargs:
                if key not in named:
                    close = difflib.get_close_matches(key, sorted(named), n=1, cutoff=0.6)
                    hint = f"did you mean {close[0]!r}? " if close else ""
                    raise error(
                        f"{what} has no option {key!r}; {hint}its options are "
                        f"{', '.join(options) or 'none'}"
                    )
            if not spread and len(args) > len(positional):
                given = len(args) - (len(positional) - len(counted))
                raise error(
                    f"{what} takes {plural(len(counted), 'positional argument')} "
                    f"({', '.join(counted)}), found {given}; give the options by name: "
                    f"{', '.join(f'{name}=...' for name in options) or 'none'}"
                )
            for name in positional[: len(args)] if kwargs else ():
                if name in kwargs:
                    raise error(
                        f"{what} got its argument {name!r} both by position and by name; "
                        "give it once"
                    )
            missing = [
                name for index, name in needed if index >= len(args) and name not in kwargs
            ] + [name for name in needed_by_name if name not in kwargs]
            if missing:
                quoted = [repr(name) for name in missing]
                names = " and ".join([", ".join(quoted[:-1]), quoted[-1]] if quoted[1:] else quoted)
                raise error(
                    f"{what} is missing its required "
                    f"argument{'s' if len(missing) != 1 else ''} {names}; "
                    f"call it as {shown_usage}"
                )

        if inspect.iscoroutinefunction(function):
            # An ``async def`` stays one (its arguments are checked when it is awaited).
            run = cast(Callable[..., Awaitable[object]], function)

            @functools.wraps(function)
            async def checked_async(*args: object, **kwargs: object) -> object:
                check(args, kwargs)
                return await run(*args, **kwargs)

            return cast(Callable[_P, _R], checked_async)

        @functools.wraps(function)
        def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            check(args, kwargs)
            return function(*args, **kwargs)

        return checked

    return decorate


def plural(n: int, noun: str, many: str = "") -> str:
    """``n noun`` with the noun in the plural (``many``, else ``noun`` + s) unless ``n``
    is 1: ``1 segment``, ``2 segments``."""
    return f"{n} {noun}" if n == 1 else f"{n} {many or noun + 's'}"


def _a(noun: str) -> str:
    """``noun`` with its indefinite article."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _expected(
    kind: str, low: float | None, high: float | None, optional: bool, *, exclusive_min: bool = False
) -> str:
    """How a message names a number in a range: ``an int from 1 to 1000``, ``None or...``."""
    if low is not None and high is not None:
        text = f"{kind} from {_num(low)} to {_num(high)}"
        if exclusive_min:
            text = f"{kind} above {_num(low)} and at most {_num(high)}"
    elif low is not None:
        text = f"{kind} {'>' if exclusive_min else '>='} {_num(low)}"
    elif high is not None:
        text = f"{kind} <= {_num(high)}"
    else:
        text = kind
    return f"None or {text}" if optional else text


def _num(value: float) -> str:
    """A bound as a message writes it (2**63 - 1 rather than 9223372036854775807)."""
    if value == 2**63 - 1:
        return "2**63 - 1"
    if value == -(2**63):
        return "-2**63"
    return str(value)
