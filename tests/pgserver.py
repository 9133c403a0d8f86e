"""A real PostgreSQL server for the tests, started in a temporary directory.

`shared()` starts one server for the whole test run (on first use; stopped at
exit); `Server` starts further ones that a test may kill and restart. The
server is Debian's (``initdb``/``pg_ctl`` on PATH or in
``/usr/lib/postgresql/*/bin``). It listens on a Unix socket in its own
directory only. initdb refuses to run as root, so as root the server runs as
the ``postgres`` system user (which the Debian package creates).

Test servers run with ``fsync=off``: killing the server process (SIGKILL)
loses nothing the kernel already has, which is what the fault tests need, and
the tests run faster. ``synchronous_commit`` stays on, so an acknowledged
commit has reached the kernel. Benchmarks start theirs with ``durable=True``.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["SKIP_REASON", "Server", "available", "bin_dir", "shared"]

SKIP_REASON = (
    "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in "
    "/usr/lib/postgresql/*/bin; install them with `apt-get install postgresql`"
)


def bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(os.path.realpath(found)).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
    )
    return Path(candidates[-1]).parent if candidates else None


def _run_as() -> str | None:
    """The user to run the server as (None: the current user)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "absent"
    return "postgres"


def available() -> bool:
    """True when a server can be started here."""
    return bin_dir() is not None and _run_as() != "absent"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_TEMPLATE: dict[str, Path] = {}


class Server:
    """One PostgreSQL server in a fresh temporary directory.

    Parameters:
        durable: keep fsync on (benchmarks); tests run with it off.
        settings: extra ``-c name=value`` settings.
        file_limit: the largest file the server may write, in bytes (``ulimit -f``):
            a relation that would grow past it fails as on a full disk.
    """

    def __init__(
        self,
        *,
        durable: bool = False,
        settings: dict[str, str] | None = None,
        file_limit: int | None = None,
    ) -> None:
        binaries = bin_dir()
        if binaries is None or _run_as() == "absent":
            raise RuntimeError(SKIP_REASON)
        self.bin = binaries
        self.user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="turnlog-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.durable = durable
        self.settings = {
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.root}'",
            "port": str(self.port),
            "max_connections": "120",
            "fsync": "on" if durable else "off",
            "full_page_writes": "on" if durable else "off",
            "log_min_messages": "fatal",
            "max_wal_size": "1GB",
            **(settings or {}),
        }
        self.file_limit = file_limit
        self._watched = False
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._initdb()
        self.start()

    def _as_user(self, argv: list[str]) -> list[str]:
        if self.user is None:
            return argv
        return ["runuser", "-u", self.user, "--", *argv]

    def _initdb(self) -> None:
        # One initdb per run: later servers copy its data directory (much faster).
        if self.user is not None:
            os.chown(self.root, pwd.getpwnam(self.user).pw_uid, pwd.getpwnam(self.user).pw_gid)
        template = _TEMPLATE.get("data")
        if template is None:
            template_root = Path(tempfile.mkdtemp(prefix="turnlog-pg-template-"))
            template = template_root / "data"
            if self.user is not None:
                pw = pwd.getpwnam(self.user)
                os.chown(template_root, pw.pw_uid, pw.pw_gid)
            subprocess.run(
                self._as_user(
                    [
                        str(self.bin / "initdb"),
                        "-D",
                        str(template),
                        "-U",
                        "postgres",
                        "--auth=trust",
                        "-E",
                        "UTF8",
                        "--locale=C",
                        "--no-sync",
                    ]
                ),
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            _TEMPLATE["data"] = template
            atexit.register(shutil.rmtree, template_root, True)
        subprocess.run(self._as_user(["cp", "-a", str(template), str(self.data)]), check=True)
        self.data_template = template.parent

    def url(self, dbname: str = "postgres", **params: str) -> str:
        """A URL to this server (``params`` are added to the query)."""
        query = "&".join(
            [f"host={self.root}", f"port={self.port}", *(f"{k}={v}" for k, v in params.items())]
        )
        return f"postgresql://postgres@/{dbname}?{query}"

    def start(self) -> None:
        """Start the server (again) and wait until it accepts connections."""
        options = " ".join(f"-c {k}={v}" for k, v in self.settings.items())
        argv = self._as_user(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-w",
                "-t",
                "60",
                "-l",
                str(self.root / "log"),
                "-o",
                options,
                "start",
            ]
        )
        limit = self.file_limit

        def pre() -> None:
            if limit is not None:
                import resource

                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        subprocess.run(
            argv,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=pre if limit is not None else None,
        )
        if not self._watched:
            # Should this process die without its atexit handlers (SIGKILL, a killed CI
            # job), a watchdog stops the server and removes its directory.
            self._watched = True
            stop = " ".join(
                self._as_user(
                    [
                        str(self.bin / "pg_ctl"),
                        "-D",
                        str(self.data),
                        "-m",
                        "immediate",
                        "-w",
                        "stop",
                    ]
                )
            )
            script = (
                f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; {stop}; "
                f"rm -rf '{self.root}' '{self.data_template}'"
            )
            self._watchdog = subprocess.Popen(
                ["sh", "-c", script],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )

    def pid(self) -> int:
        """The postmaster's process id."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend, as a crash would."""
        pid = self.pid()
        children = []
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.append(int(stat.split("/")[2]))
        for p in [pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        for _ in range(500):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                self._as_user(
                    [
                        str(self.bin / "pg_ctl"),
                        "-D",
                        str(self.data),
                        "-m",
                        "immediate",
                        "-w",
                        "stop",
                    ]
                ),
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        shutil.rmtree(self.root, ignore_errors=True)
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()
            self._watchdog = None


_SHARED: list[Server] = []


def shared() -> Server:
    """The server shared by the whole test run (started on first use)."""
    if not _SHARED:
        server = Server()
        _SHARED.append(server)
        atexit.register(server.stop)
    return _SHARED[0]
