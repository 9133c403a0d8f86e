"""The ``serve`` verb: the read-only web inspector."""

from __future__ import annotations

import argparse
import sys

import turnlog

from ._common import (
    EXIT_ERROR,
    EXIT_OK,
    _open,
    _UsageError,
)
from ._verbs import Verbs, arg

VERBS = Verbs()


@VERBS.verb(
    "serve",
    "serve a read-only web inspector of the store (sessions, timelines, "
    "request receipts, diffs, summaries, memories; JSON under /api/)",
    arg(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1; any other address requires the token)",
    ),
    arg(
        "--port",
        type=int,
        default=8765,
        metavar="N",
        help="the port (default 8765; 0 picks a free one)",
    ),
    arg(
        "--token",
        default=None,
        metavar="TOKEN",
        help="the access token every request must carry (default: none on loopback, a "
        "new random one printed with the address otherwise)",
    ),
    prints=False,
)
def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .. import web
    except ImportError as exc:
        print(
            f"turnlog: error: `turnlog serve` needs the web extra (missing {exc.name}): "
            "pip install 'turnlog[web]'",
            file=sys.stderr,
        )
        return EXIT_ERROR
    if not 0 <= args.port <= 65535:
        raise _UsageError(f"--port must be 0 to 65535, found {args.port}")
    token = args.token
    if token is None and not web.is_loopback(args.host):
        token = web.new_token()
    with _open(args) as log:
        try:
            server = web.Server(log, host=args.host, port=args.port, token=token)
        except OSError as exc:
            raise _UsageError(
                f"cannot listen on {args.host}:{args.port}: "
                f"{exc.strerror or exc}; pass another --port"
            ) from None
        print(f"turnlog inspector (read-only) on {server.url}", flush=True)
        where = turnlog.stores.hide_credentials(log.store.location)
        print(f"store {where}; Ctrl-C to stop", flush=True)
        server.run()
    return EXIT_OK
