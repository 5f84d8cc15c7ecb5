"""A real PostgreSQL server for the shared-metastore tests: its own data folder, a free port on loopback, stopped
after. Debian's ``postgresql`` package provides it (``.ci/run`` installs it); run as root, the server runs as the
package's ``postgres`` user, as PostgreSQL refuses root."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def server_binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl`` (the newest of Debian's ``/usr/lib/postgresql/*/bin``, else the
    ``PATH``'s), ``None`` when neither has them."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def postgres_server(database: str = "hive"):
    """Start a server with an empty ``database`` and its data in a new folder under the system's temporary one
    (which the ``postgres`` user can reach, unlike pytest's); yields its JDBC URL (user ``postgres``, trusted on
    loopback). Stops the server and removes the folder on exit."""
    binaries = server_binaries()
    assert binaries is not None, "PostgreSQL's server is not installed: apt-get install -y postgresql"
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    folder = Path(tempfile.mkdtemp(prefix="backfill-postgres-"))
    if as_root:
        shutil.chown(folder, "postgres")
    data, port = folder / "data", _free_port()
    run = lambda *argv: subprocess.run([*prefix, *argv], check=True, capture_output=True, text=True, timeout=120)  # noqa: E731
    try:
        run(str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w", "-t", "60", "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        try:
            run(str(binaries / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-q", "-c",
                f"CREATE DATABASE {database}")
            yield f"jdbc:postgresql://127.0.0.1:{port}/{database}?user=postgres&password=unused"
        finally:
            subprocess.run([*prefix, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                           capture_output=True, timeout=120)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def psql(url: str, query: str) -> list[str]:
    """Rows of ``query`` on the server and database of ``url`` (one line each, columns joined by ``|``)."""
    from backfill_lib.core.metastore_url import parse_metastore_url

    where = parse_metastore_url(url)
    binaries = server_binaries()
    done = subprocess.run([str(binaries / "psql"), "-h", where.host, "-p", str(where.port), "-U", "postgres",
                           "-d", where.database, "-Atc", query], check=True, capture_output=True, text=True,
                          timeout=60)
    return done.stdout.splitlines()
