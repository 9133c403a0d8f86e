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


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .. import web
    except ImportError as exc:
        print(f"turnlog: error: `turnlog serve` needs the web extra (missing {exc.name}): "
              "pip install 'turnlog[web]'", file=sys.stderr)
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
            raise _UsageError(f"cannot listen on {args.host}:{args.port}: "
                              f"{exc.strerror or exc}; pass another --port") from None
        print(f"turnlog inspector (read-only) on {server.url}", flush=True)
        where = turnlog.stores.hide_credentials(log.store.location)
        print(f"store {where}; Ctrl-C to stop", flush=True)
        server.run()
    return EXIT_OK
