"""The ``turnlog`` argument parser, built from the verbs each group module declares."""

from __future__ import annotations

import argparse

import turnlog

from . import importing, memories, packing, serve, store, tour
from ._common import _Parser
from ._verbs import Verb

#: The group modules, in the order ``turnlog --help`` lists their verbs.
GROUPS = (store, tour, packing, importing, memories, serve)


def verbs() -> list[Verb]:
    """Every verb of the command, in the order of ``turnlog --help``."""
    return [one for group in GROUPS for one in group.VERBS]


def _build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="the store directory or postgresql:// URL (default: $TURNLOG_STORE, else ./.turnlog)",
    )
    printing = _Parser(add_help=False)
    printing.add_argument("--json", action="store_true", help="machine-readable output")

    parser = _Parser(
        prog="turnlog",
        description="Inspect, verify and export a turnlog store.",
        epilog="Exit codes: 0 ok, 1 a check failed, 2 usage error, 3 turnlog "
        "error, 4 store missing. See docs/cli.md.",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="PATH",
        help="the store directory or postgresql:// URL (default: $TURNLOG_STORE, else ./.turnlog)",
    )
    parser.add_argument("--version", action="version", version=f"turnlog {turnlog.__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=_Parser)
    for verb in verbs():
        p = sub.add_parser(
            verb.name,
            parents=[common, printing] if verb.prints else [common],
            help=verb.help,
            description=verb.help,
        )
        p.set_defaults(run=verb.run, session_args=verb.session_args)
        for argument in verb.arguments:
            argument.add_to(p)
    return parser
