"""``turnlog serve``: a read-only web inspector over a store (needs ``turnlog[web]``).

`create_app` builds the ASGI app over a log; `Server` runs it with uvicorn on a
socket of its own (``port=0`` picks a free port), in the foreground (`Server.run`,
what ``turnlog serve`` does) or in a thread (`Server.start`, for tests and
scripts). docs/inspector.md lists the pages and the JSON API.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import threading
import time

import turnlog
import uvicorn

from ._app import CSP, ROUTES, create_app
from ._inspector import Inspector

__all__ = ["CSP", "ROUTES", "Inspector", "Server", "create_app", "is_loopback", "new_token"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names a loopback address (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A fresh random access token (32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


class Server:
    """The inspector on ``host:port`` over ``log``.

    Parameters:
        log: the log to show (opened read-only by the caller).
        host: the address to listen on; any address other than loopback needs
            ``token``.
        port: the port (0: a free one; `url` names the one bound).
        token: the access token (required for a non-loopback ``host``).

    Raises:
        ValueError: a non-loopback host without a token.
        OSError: the address cannot be bound.
    """

    def __init__(
        self, log: turnlog.Log, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None
    ) -> None:
        loopback = is_loopback(host)
        if not loopback and not token:
            raise ValueError(f"serving on {host} (not a loopback address) needs a token")
        self.log = log
        self.token = token
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host.strip("[]"), port))
        except OSError:
            self.socket.close()
            raise
        self.socket.listen(128)
        bound = self.socket.getsockname()[1]
        shown = f"[{host.strip('[]')}]" if family == socket.AF_INET6 else host
        self.base = f"http://{shown}:{bound}"
        self.port = bound
        config = uvicorn.Config(
            create_app(log, token=token, loopback=loopback),
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The address to open (with ``?token=`` when a token is needed)."""
        return self.base + "/" + (f"?token={self.token}" if self.token else "")

    def run(self) -> None:
        """Serve until interrupted (Ctrl-C)."""
        self._server.run(sockets=[self.socket])

    def start(self) -> Server:
        """Serve in a daemon thread; returns once the server answers."""
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the inspector did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop a server started with `start` and wait for its thread."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.socket.close()
