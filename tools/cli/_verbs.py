"""How a verb is declared: one `Verb` record beside its handler.

A group module makes one `Verbs` list and declares each verb on its handler::

    VERBS = Verbs()

    @VERBS.verb("show", "print one event in full, with its prev and hash",
                arg("session", metavar="SESSION"),
                arg("seq", metavar="SEQ", type=int))
    def _cmd_show(args: argparse.Namespace) -> int:
        ...

`turnlog.tools.cli._parser` builds the parser from the groups' lists, in the
order of `GROUPS` there and of the declarations in each module (the order of
``turnlog --help``). A new verb is its handler and its declaration; a new
group is one module and its place in `GROUPS`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Arg", "Handler", "OneOf", "Verb", "Verbs", "arg", "one_of", "session_arg"]

#: A verb's handler: the parsed arguments in, the exit code out.
Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Arg:
    """One argument: what `argparse.ArgumentParser.add_argument` takes."""

    flags: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    #: It names an existing session: a unique prefix of the id is completed.
    session: bool = False

    @property
    def dest(self) -> str:
        """The attribute of the parsed arguments it sets."""
        dest = self.options.get("dest")
        if isinstance(dest, str):
            return dest
        long = [f for f in self.flags if f.startswith("--")]
        return (long or list(self.flags))[0].lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup) -> None:
        parser.add_argument(*self.flags, **self.options)


@dataclass(frozen=True)
class OneOf:
    """Arguments of which at most one may be given."""

    args: tuple[Arg, ...]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_mutually_exclusive_group()
        for one in self.args:
            one.add_to(group)


def arg(*flags: str, **options: Any) -> Arg:
    """An argument, spelled as for `argparse.ArgumentParser.add_argument`."""
    return Arg(flags, options)


def session_arg(*flags: str, **options: Any) -> Arg:
    """An argument naming an existing session: the verb's handler receives the full id
    of the one session whose id begins with what was typed."""
    return Arg(flags or ("session",), {"metavar": "SESSION", **options}, session=True)


def one_of(*args: Arg) -> OneOf:
    """Mutually exclusive arguments."""
    return OneOf(args)


@dataclass(frozen=True)
class Verb:
    """One verb of the ``turnlog`` command.

    Attributes:
        name: the verb as typed (``turnlog NAME``).
        help: one line for ``turnlog --help`` and the verb's own ``--help``.
        run: the handler.
        arguments: its arguments, in the order of its usage line.
        prints: whether it takes ``--json`` (every verb takes ``--store``).
    """

    name: str
    help: str
    run: Handler
    arguments: tuple[Arg | OneOf, ...] = ()
    prints: bool = True

    @property
    def session_args(self) -> tuple[str, ...]:
        """The attributes of the parsed arguments that name existing sessions."""
        return tuple(one.dest for one in self.arguments if isinstance(one, Arg) and one.session)


class Verbs:
    """The verbs of one group module, in the order they are declared."""

    def __init__(self) -> None:
        self._verbs: list[Verb] = []

    def verb(
        self,
        name: str,
        help: str,  # noqa: A002
        *arguments: Arg | OneOf,
        prints: bool = True,
    ) -> Callable[[Handler], Handler]:
        """Declare the decorated function as the handler of verb ``name``."""

        def declare(run: Handler) -> Handler:
            self._verbs.append(Verb(name, help, run, arguments, prints))
            return run

        return declare

    def __iter__(self) -> Iterator[Verb]:
        return iter(self._verbs)
