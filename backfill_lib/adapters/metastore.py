"""A shared Hive metastore in PostgreSQL for the embedded default (``Settings.metastore_url``).

The embedded default's Derby metastore admits one process at a time. With ``metastore_url`` the local session
reaches a PostgreSQL database through Spark's built-in Hive client instead, so several ``backfill`` processes
share one catalog, as they would a cluster's Hive metastore. Before the JVM starts:

1. the database must accept the URL's login within :data:`CONNECT_TIMEOUT_SECONDS` (pg8000, no JVM: rather than
   a start that waits on a metastore that never answers, or buries PostgreSQL's refusal in Java stack traces);
2. the PostgreSQL JDBC driver (:data:`DRIVER_PACKAGE`) is fetched from Maven Central once, into the Ivy home's
   ``jars/`` folder, and put on the driver's class path (``spark.driver.extraClassPath``: DataNucleus does not
   find a driver added by ``spark.jars`` alone);
3. the metastore's tables are created, all at once, by DataNucleus's own SchemaTool from the mapping the Hive
   client ships (``package.jdo`` in Spark's ``hive-metastore`` jar). Creating them
   lazily (``datanucleus.schema.autoCreateAll``) deadlocks on PostgreSQL: one connection adds a foreign key to
   a table another holds in an open transaction. The session then runs with ``autoCreateAll`` off. Done when the
   login finds no ``DBS`` or no ``VERSION`` table.
4. the schema version row (Hive's ``VERSION`` table) is written once, by the login, under an advisory lock of the
   database. Hive clients recording it themselves race: two processes starting together on a new metastore each
   added a row, and every later client refused to start ("Unable to instantiate SessionHiveMetaStoreClient").
   A second row left by that race is removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import hashlib
import os
import subprocess
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from backfill_lib.core.errors import MetastoreError
from backfill_lib.core.metastore_url import MetastoreUrl, parse_metastore_url, redacted
from backfill_lib.core.settings import Settings

#: The JDBC driver fetched for a PostgreSQL metastore (Maven coordinate)
DRIVER_PACKAGE = "org.postgresql:postgresql:42.7.4"
DRIVER_CLASS = "org.postgresql.Driver"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
#: seconds the metastore's database has to accept a TCP connection, and the JDBC driver to log in
CONNECT_TIMEOUT_SECONDS = 10
#: seconds SchemaTool has to create the tables
SCHEMA_TIMEOUT_SECONDS = 300
CLASS_PATH = "spark.driver.extraClassPath"
#: the PostgreSQL advisory lock under which the schema version row is written (any fixed 64-bit number)
VERSION_LOCK = 0x6261636B66696C6C


def metastore_options(url: str) -> dict[str, str]:
    """The Spark options of a session whose Hive client keeps its catalog in the PostgreSQL database at ``url``.
    Pure. The tables and the schema version are expected to exist (:func:`prepare_metastore`), so the client
    creates none lazily and records no version."""
    return {
        "spark.hadoop.javax.jdo.option.ConnectionURL": _with_timeouts(url),
        "spark.hadoop.javax.jdo.option.ConnectionDriverName": DRIVER_CLASS,
        "spark.hadoop.datanucleus.schema.autoCreateAll": "false",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        "spark.hadoop.hive.metastore.schema.verification.record.version": "false",
    }


def _with_timeouts(url: str) -> str:
    """``url`` with PostgreSQL's ``connectTimeout`` and ``loginTimeout`` (seconds) unless it sets them."""
    extra = [f"{name}={CONNECT_TIMEOUT_SECONDS}" for name in ("connectTimeout", "loginTimeout")
             if f"{name.lower()}=" not in url.lower()]
    if not extra:
        return url
    return url + ("&" if "?" in url else "?") + "&".join(extra)


def prepare_metastore(settings: Settings, options: dict[str, str]) -> None:
    """Make ``settings.metastore_url`` usable by the session about to start with ``options`` (Spark options,
    changed in place: the JDBC driver is put first on ``spark.driver.extraClassPath``): log in to the database,
    fetch the driver once, create the tables when the database has none.

    Raises
    ------
    MetastoreError
        When the database does not answer within :data:`CONNECT_TIMEOUT_SECONDS`, refuses the login (a wrong
        password, user or database name: PostgreSQL's own message) or the schema version row, the driver cannot
        be fetched, or SchemaTool fails (its last line in the message); the URL is shown without its password.
    """
    where = parse_metastore_url(settings.metastore_url)
    has_tables = _log_in(where)
    jar = driver_jar(options)
    own = options.get(CLASS_PATH)
    options[CLASS_PATH] = os.pathsep.join([str(jar)] + ([own] if own else []))
    if not has_tables:
        _create_tables(settings, where, jar)


def _log_in(where: MetastoreUrl) -> bool:
    """Log in to the database of ``where`` as its URL says (pg8000, no JVM) and tell whether it holds the
    metastore's tables (Hive's ``DBS`` and ``VERSION``); when it does, leave one schema version row
    (:func:`_one_version`)."""
    from urllib.parse import parse_qs, unquote, urlsplit

    try:
        import pg8000.native
        from pg8000.exceptions import DatabaseError, InterfaceError
    except ImportError:
        raise MetastoreError("metastore_url needs the pg8000 package (the local extra: pip install "
                             "'delta-backfill[local]')") from None
    parts = urlsplit(where.url[len("jdbc:"):])
    query = {k.lower(): v[-1] for k, v in parse_qs(parts.query).items()}
    user = query.get("user") or (unquote(parts.username) if parts.username else None) or getpass.getuser()
    password = query.get("password") or (unquote(parts.password) if parts.password else None)
    try:
        connection = pg8000.native.Connection(user, host=where.host, port=where.port, database=where.database,
                                              password=password, timeout=CONNECT_TIMEOUT_SECONDS)
    except DatabaseError as exc:
        raise MetastoreError(f"metastore_url {where.shown}: the database refused the login: {_message(exc)}") from None
    except (InterfaceError, OSError) as exc:
        raise MetastoreError(f"metastore_url {where.shown}: no answer from {where.host}:{where.port} "
                             f"(waited at most {CONNECT_TIMEOUT_SECONDS} s): {exc}") from None
    try:
        # both: SchemaTool creates VERSION among the others, and adds what a stopped creation left missing
        has_tables = bool(connection.run("""SELECT to_regclass('"DBS"') IS NOT NULL
                                            AND to_regclass('"VERSION"') IS NOT NULL""")[0][0])
        if has_tables:
            try:
                _one_version(connection)
            except DatabaseError as exc:
                raise MetastoreError(f"metastore_url {where.shown}: could not write the schema version: "
                                     f"{_message(exc)}") from None
            except (InterfaceError, OSError) as exc:
                raise MetastoreError(f"metastore_url {where.shown}: no answer from {where.host}:{where.port} "
                                     f"while writing the schema version (waited at most "
                                     f"{CONNECT_TIMEOUT_SECONDS} s): {exc}") from None
        return has_tables
    finally:
        with contextlib.suppress(Exception):  # a connection that failed mid-statement may not close cleanly
            connection.close()


def _message(exc: Exception) -> object:
    """PostgreSQL's own message of a pg8000 ``DatabaseError``."""
    detail = exc.args[0] if exc.args else exc
    return detail.get("M", detail) if isinstance(detail, dict) else detail


def _one_version(connection) -> None:
    """Leave exactly one row in Hive's ``VERSION`` table (:func:`schema_version`), in one transaction under an
    advisory lock, so that processes logging in together write it once."""
    # READ COMMITTED whatever the database's default: each statement then sees what a process that held the lock
    # before committed (a snapshot taken at the lock's wait would not)
    connection.run("BEGIN ISOLATION LEVEL READ COMMITTED")
    try:
        connection.run("SELECT pg_advisory_xact_lock(:key)", key=VERSION_LOCK)
        rows = connection.run('SELECT "VER_ID" FROM "VERSION" ORDER BY "VER_ID"')
        if not rows:
            connection.run('INSERT INTO "VERSION" ("VER_ID", "SCHEMA_VERSION", "VERSION_COMMENT") '
                           "VALUES (1, :version, 'Set by delta-backfill') ON CONFLICT DO NOTHING",
                           version=schema_version())
        elif len(rows) > 1:
            connection.run('DELETE FROM "VERSION" WHERE "VER_ID" <> :first', first=rows[0][0])
        connection.run("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):  # the error that got here is the one to report
            connection.run("ROLLBACK")
        raise


def schema_version() -> str:
    """The metastore schema version of Spark's built-in Hive client: ``X.Y.0`` of its ``hive-metastore-X.Y.Z``
    jar (``2.3.0`` for Hive 2.3.10), as the client itself would record it."""
    jar = _metastore_jar()
    major, minor = jar.name[len("hive-metastore-"):-len(".jar")].split(".")[:2]
    return f"{major}.{minor}.0"


def _metastore_jar() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    spark_jars = Path(_find_spark_home()) / "jars"
    found = sorted(spark_jars.glob("hive-metastore-*.jar"))
    if not found:
        raise MetastoreError(f"no hive-metastore jar in {spark_jars}: this Spark has no Hive client for "
                             "metastore_url")
    return found[-1]


def driver_jar(options: dict[str, str]) -> Path:
    """The PostgreSQL JDBC driver's jar in the Ivy home (``<ivy>/jars/org.postgresql_postgresql-<v>.jar``, where
    Spark's own resolution puts it), fetched from Maven Central and checked against its SHA-1 first if absent."""
    from backfill_lib.adapters.delta_jars import ivy_home

    group, artifact, version = DRIVER_PACKAGE.split(":")
    jar = ivy_home(options) / "jars" / f"{group}_{artifact}-{version}.jar"
    if jar.is_file() and jar.stat().st_size > 0:
        return jar
    remote = f"{MAVEN_CENTRAL}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"
    try:
        with urllib.request.urlopen(remote, timeout=60) as response:
            content = response.read()
        with urllib.request.urlopen(remote + ".sha1", timeout=60) as response:
            expected = response.read().decode().split()[0].strip()
    except OSError as exc:
        raise MetastoreError(f"could not fetch the PostgreSQL JDBC driver {DRIVER_PACKAGE} from {remote} ({exc}); "
                             f"put the jar at {jar}") from None
    if hashlib.sha1(content).hexdigest() != expected:
        raise MetastoreError(f"the PostgreSQL JDBC driver fetched from {remote} does not match its SHA-1; "
                             f"put the jar at {jar}")
    jar.parent.mkdir(parents=True, exist_ok=True)
    partial = jar.with_name(f"{jar.name}.{os.getpid()}.part")
    partial.write_bytes(content)
    partial.replace(jar)
    return jar


def _create_tables(settings: Settings, where: MetastoreUrl, jar: Path) -> None:
    """Create the metastore's tables with SchemaTool, under a lock in the home so that processes starting together
    on one machine create them once (the later ones find them when they log in again)."""
    home = settings.home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "metastore-tables.lock", "a") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        if not _log_in(where):
            _run_schema_tool(where, jar)
            _log_in(where)  # now with tables: writes the schema version


def _run_schema_tool(where: MetastoreUrl, jar: Path) -> None:
    """``SchemaTool -create`` of the Hive client's mapping against ``where``: creates the tables that are missing
    and leaves the others (a second run changes nothing)."""
    from backfill_lib.adapters.jvm_archive import _java_binary

    metastore_jar = _metastore_jar()
    spark_jars = metastore_jar.parent
    with tempfile.TemporaryDirectory(prefix="backfill-metastore-") as folder:
        mapping = Path(folder) / "package.jdo"
        with zipfile.ZipFile(metastore_jar) as archive:
            mapping.write_bytes(archive.read("package.jdo"))
        properties = Path(folder) / "datanucleus.properties"
        properties.write_text("\n".join([
            f"datanucleus.ConnectionDriverName={DRIVER_CLASS}",
            f"datanucleus.ConnectionURL={_with_timeouts(where.url)}",
            # Hive's own defaults (HiveConf): the same names as the Hive client's
            "datanucleus.identifierFactory=datanucleus1",
            "datanucleus.rdbms.useLegacyNativeValueStrategy=true",
            "datanucleus.storeManagerType=rdbms",
            "javax.jdo.PersistenceManagerFactoryClass=org.datanucleus.api.jdo.JDOPersistenceManagerFactory",
        ]) + "\n")
        command = [_java_binary(), "-cp", os.pathsep.join([f"{spark_jars}/*", str(jar)]),
                   "org.datanucleus.store.schema.SchemaTool", "-create", "-api", "JDO",
                   "-props", str(properties), str(mapping)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=SCHEMA_TIMEOUT_SECONDS,
                                  cwd=folder)
        except subprocess.TimeoutExpired:
            raise MetastoreError(f"metastore_url {where.shown}: creating the metastore's tables took over "
                                 f"{SCHEMA_TIMEOUT_SECONDS} s") from None
    output = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode != 0 or not any("completed successfully" in line for line in output):
        last = next((line.strip() for line in reversed(output) if line.strip()), f"exit code {done.returncode}")
        raise MetastoreError(f"metastore_url {where.shown}: creating the metastore's tables failed: {redacted(last)}")
