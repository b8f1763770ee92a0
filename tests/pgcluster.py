"""A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` in a temporary folder, a
server on a free loopback port (and a unix socket in the same folder), removed on `stop()`.

The server refuses to run as root, so under root it runs as the `postgres` user where Debian's
package made one, else as `nobody`. `OPTICTX_POSTGRES_BIN` names the folder of `initdb` and
`postgres` when they are not on PATH or under /usr/lib/postgresql/*/bin.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path


def binaries() -> Path | None:
    """The folder holding `initdb` and `postgres`, or None when no server is installed."""
    candidates = [os.environ.get("OPTICTX_POSTGRES_BIN", "")]
    found = shutil.which("initdb")
    candidates.append(str(Path(found).resolve().parent) if found else "")
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True)
    for folder in filter(None, candidates):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "postgres").is_file():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """`Cluster().start()`; `url(db)` for a connection URL; `database()` makes a fresh database."""

    def __init__(self, *, fsync: bool = False) -> None:
        self.bin = binaries()
        if self.bin is None:
            raise FileNotFoundError("no PostgreSQL server installed (initdb/postgres; Debian: apt-get install "
                                    "postgresql)")
        self.fsync = fsync  # off in tests (only clients are killed, never the server); on in benchmarks
        self.port = 0
        self.folder = Path(tempfile.mkdtemp(prefix="optictx-pg-"))
        self._server: subprocess.Popen[bytes] | None = None
        self._user: str | None = None
        if os.geteuid() == 0:
            names = {p.pw_name for p in pwd.getpwall()}
            self._user = "postgres" if "postgres" in names else "nobody"
            os.chown(self.folder, pwd.getpwnam(self._user).pw_uid, -1)

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([str(self.bin / args[0]), *args[1:]], capture_output=True, check=True,
                              user=self._user, cwd=self.folder, timeout=120)

    def start(self) -> Cluster:
        data = self.folder / "data"
        self._run("initdb", "-D", str(data), "-A", "trust", "-U", "optictx", "-E", "UTF8", "--locale=C", "--no-sync")
        self.port = _free_port()
        settings = {"listen_addresses": "127.0.0.1", "port": str(self.port),
                    "unix_socket_directories": str(self.folder), "fsync": "on" if self.fsync else "off",
                    "max_connections": "200", "shared_buffers": "64MB"}
        args = [str(self.bin / "postgres"), "-D", str(data)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        self._server = subprocess.Popen(args, user=self._user, cwd=self.folder, stdout=subprocess.DEVNULL,
                                        stderr=open(self.folder / "server.log", "wb"))  # noqa: SIM115
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if (self._server is not None and self._server.poll() is not None) or time.monotonic() > deadline:
                    log = (self.folder / "server.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"PostgreSQL did not start:\n{log}") from None
                time.sleep(0.1)

    def url(self, database: str = "postgres", **query: str) -> str:
        extra = "&".join(f"{k}={v}" for k, v in query.items())
        return f"postgresql://optictx@127.0.0.1:{self.port}/{database}" + (f"?{extra}" if extra else "")

    def database(self) -> str:
        """A new, empty database; its name."""
        import psycopg

        name = f"t{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def stop(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.send_signal(signal.SIGINT)  # fast shutdown: roll back clients, then exit
            try:
                self._server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
        self._server = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
