"""Issue 22 item 3: a start without Ivy or launcher output, Delta's jars straight from the Ivy cache.

The pure tests come first (the JVM's stderr filter on a real pipe, the cached jar list); then one real
``backfill plan`` in its own process (one Spark start) on tiny path-based Delta tables written by the test
session: the plan prints, and its stderr holds no line at all (no Ivy report, no incubator warning, no
"fetching" line: the test session's own start has cached the jar list)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import date

from backfill_lib.adapters.delta_jars import cached_jars, jar_list_path, remember_jars
from backfill_lib.adapters.jvm_archive import ARCHIVE_ENV, archive_dir, archive_options, archive_path, finish_archive
from backfill_lib.adapters.jvm_output import INCUBATOR_WARNING, JvmStderr
from backfill_lib.adapters.session import (JAVA_OPTIONS, LISTING_PARALLELISM, SHORT_LIVED_JVM_OPTIONS,
                                          SNAPSHOT_PARTITIONS, local_session_options, sized_for_local)
from backfill_lib.core.settings import Settings, SparkSettings
from backfill_lib.core.table_names import path_table
from tests.conftest import ROOT, write_request
from tests.fixtures import EVENTS_SCHEMA, TARGET_ROWS

IVY_REPORT = [
    ":: loading settings :: url = jar:file:/x/ivy-2.5.3.jar!/org/apache/ivy/core/settings/ivysettings.xml",
    "Ivy Default Cache set to: /root/.ivy2.5.2/cache",
    ":: resolving dependencies :: org.apache.spark#spark-submit-parent-1;1.0",
    "\tfound io.delta#delta-spark_4.1_2.13;4.4.0 in central",
]
IVY_END = "\t0 artifacts copied, 33 already retrieved (0kB/25ms)"



def test_the_settings_java_options_come_after_the_products_own_not_instead(tmp_path):
    spark = SparkSettings(options={JAVA_OPTIONS: "-Dderby.storage.pageSize=8192  -Xss4m", "spark.ui.enabled": "true"})
    settings = Settings(home=tmp_path / "h", spark=spark)
    home = (tmp_path / "h").resolve()
    own = f"-Dderby.system.home={home} -Dlog4j.configurationFile={home / 'log4j2.properties'}"

    options = local_session_options(settings)
    assert options[JAVA_OPTIONS] == f"{own} -Dderby.storage.pageSize=8192  -Xss4m"
    assert options["spark.ui.enabled"] == "true"  # any other option: the settings' value wins
    assert "spark.sql.adaptive.enabled" not in options

    short = local_session_options(settings, short_lived=True)
    assert short[JAVA_OPTIONS] == f"{own} -Dderby.storage.pageSize=8192  -Xss4m {SHORT_LIVED_JVM_OPTIONS}"
    assert short["spark.sql.adaptive.enabled"] == "false"
    assert local_session_options(Settings(home=tmp_path / "h"))[JAVA_OPTIONS] == own  # none in the settings


def test_a_local_master_rebuilds_delta_snapshots_in_one_task_per_thread_unless_the_settings_say_otherwise(spark, tmp_path):
    assert [sized_for_local(m).get(SNAPSHOT_PARTITIONS) for m in ("local", "local[2]", "local[3,4]", "local[*]")] \
        == ["1", "2", "3", str(os.cpu_count())]
    assert sized_for_local("local[1]")[LISTING_PARALLELISM] == "2"
    assert sized_for_local("local-cluster[2,1,1024]") == sized_for_local("spark://h:7077") == {}
    own = SparkSettings(master="local[2]", options={SNAPSHOT_PARTITIONS: "16"})
    assert local_session_options(Settings(home=tmp_path / "h", spark=own))[SNAPSHOT_PARTITIONS] == "16"
    # the test session is the embedded default on local[2]: a RESTORE of a small table is two tasks a stage
    assert (spark.conf.get(SNAPSHOT_PARTITIONS), spark.conf.get(LISTING_PARALLELISM)) == ("2", "2")


def _through_filter(tmp_path, lines: list[str], failed: bool = False) -> str:
    """What ``lines``, written by a child process to a :class:`JvmStderr`'s pipe, come out as."""
    sink = tmp_path / "sink"
    with open(sink, "wb") as out:
        stderr = JvmStderr(sink=out.fileno())
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write(sys.stdin.read())"],
                                 stdin=subprocess.PIPE, stderr=stderr.write_fd)
        stderr.close_writer()
        child.communicate("".join(f"{line}\n" for line in lines).encode())
        if failed:
            stderr.flush_held()
        stderr._thread.join(10)
    return sink.read_text()


def test_the_launch_noise_is_left_out_and_every_other_line_passes(tmp_path):
    lines = [INCUBATOR_WARNING, *IVY_REPORT, IVY_END, "26/12/02 00:22:38 WARN SparkContext: a real warning",
             "\tat org.apache.spark.Foo.bar(Foo.scala:1)"]
    assert _through_filter(tmp_path, lines) == \
        "26/12/02 00:22:38 WARN SparkContext: a real warning\n\tat org.apache.spark.Foo.bar(Foo.scala:1)\n"


def test_an_ivy_report_that_never_ends_is_shown_whole(tmp_path):
    """A failed resolution: Ivy's report and the JVM's exception reach the terminal, in order."""
    lines = [*IVY_REPORT, "\t:: UNRESOLVED DEPENDENCIES ::",
             'Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: io.delta#x;9: not found]']
    assert _through_filter(tmp_path, lines, failed=True) == "".join(f"{line}\n" for line in lines)


def test_the_jar_list_of_a_resolution_is_used_while_all_its_jars_are_there(tmp_path):
    jars = [tmp_path / "jars" / name for name in ("io.delta_delta-spark_4.1_2.13-4.4.0.jar", "own.jar", "b.jar")]
    jars[0].parent.mkdir()
    for jar in jars:
        jar.write_bytes(b"PK")
    options = {"spark.jars.ivy": str(tmp_path), "spark.jars": str(jars[1])}
    package = "io.delta:delta-spark_4.1_2.13:4.4.0"
    assert cached_jars(options, package) is None  # never resolved: this start resolves
    resolved = ",".join(f"file://{jar}" for jar in jars)  # the session's spark.jars after Ivy: the user's jar too
    assert remember_jars(options, package, resolved) == [str(jars[0]), str(jars[2])]
    assert jar_list_path(options, package) == tmp_path / "delta-backfill-io.delta_delta-spark_4.1_2.13_4.4.0.jars"
    assert cached_jars(options, package) == [str(jars[0]), str(jars[2])]
    assert cached_jars(options, "io.delta:delta-spark_4.1_2.13:4.5.0") is None  # another version resolves
    assert cached_jars({**options, "spark.jars.repositories": "https://repo.example.com"}, package) is None
    jars[2].unlink()
    assert cached_jars(options, package) is None  # a jar gone: resolve again


def test_the_first_short_start_writes_the_class_archive_and_later_starts_map_it(tmp_path, monkeypatch):
    monkeypatch.setenv(ARCHIVE_ENV, str(tmp_path / "jvm"))
    options = {"spark.jars": "/x/delta-spark_4.1_2.13-4.4.0.jar"}
    assert archive_options(options, create=False) == ("", None)  # a long run never writes one
    java_options, temporary = archive_options(options, create=True)
    target = archive_path(tmp_path / "jvm", options)
    assert temporary == target.with_name(f"{target.name}.{os.getpid()}.tmp")
    assert java_options == f"-Xlog:cds*=off -XX:ArchiveClassesAtExit={temporary}"
    assert (tmp_path / "jvm").stat().st_mode & 0o777 == 0o700
    assert archive_path(tmp_path / "jvm", {"spark.jars": "/x/delta-spark_4.1_2.13-4.5.0.jar"}) != target
    jar = tmp_path / "local-fs.jar"
    jar.write_bytes(b"jar")
    on_class_path = {**options, "spark.driver.extraClassPath": f"/x/a.jar{os.pathsep}{jar}"}
    built = archive_path(tmp_path / "jvm", on_class_path)
    os.utime(jar, ns=(1, 1))  # rebuilt in place: the JVM would refuse the archive made with the old one
    assert archive_path(tmp_path / "jvm", on_class_path) not in (built, target)
    # the JVM's part, played by a child that writes the file when its stdin closes
    writes = f"import sys, os; sys.stdin.read(); open({str(temporary)!r}, 'wb').write(b'jsa'); os.chmod({str(temporary)!r}, 0o444)"
    unused, recent = tmp_path / "jvm" / "classes-0000000000000000.jsa", tmp_path / "jvm" / "classes-1111111111111111.jsa"
    for old, days in ((unused, 15), (recent, 13)):
        old.write_bytes(b"jsa")
        os.utime(old, (time.time() - days * 86400,) * 2)
    assert finish_archive(subprocess.Popen([sys.executable, "-c", writes], stdin=subprocess.PIPE), temporary) == target
    assert not unused.exists() and recent.exists()  # the unused for 14 days go as a new archive comes
    assert not temporary.exists()
    os.utime(target, (1, 1))
    assert archive_options(options, create=True) == (f"-Xlog:cds*=off -XX:SharedArchiveFile={target}", None)
    assert target.stat().st_mtime > time.time() - 60  # mapped: used now
    target.chmod(0o664)  # others may write it: not mapped (an archive is code), written again
    assert archive_options(options, create=False) == ("", None)
    monkeypatch.setenv(ARCHIVE_ENV, "off")
    assert archive_dir() is None and archive_options(options, create=True) == ("", None)


def test_a_failed_jvm_leaves_no_class_archive(tmp_path):
    temporary = tmp_path / f"classes-0123456789abcdef.jsa.{os.getpid()}.tmp"
    writes = f"import sys; sys.stdin.read(); open({str(temporary)!r}, 'wb').write(b'half'); sys.exit(1)"
    assert finish_archive(subprocess.Popen([sys.executable, "-c", writes], stdin=subprocess.PIPE), temporary) is None
    assert list(tmp_path.iterdir()) == []


def test_plan_in_its_own_process_prints_the_plan_and_no_launcher_output(spark, tmp_path):
    target, source = tmp_path / "events", tmp_path / "events_src"
    for path, rows in ((target, TARGET_ROWS), (source, [(3, date(2024, 3, 9), 30)])):
        spark.createDataFrame(rows, EVENTS_SCHEMA).write.format("delta").partitionBy("dt").save(str(path))
    sql = tmp_path / "events.sql"
    sql.write_text(f"SELECT id, dt, v FROM {path_table(str(source))} WHERE dt >= :range_start AND dt < :range_end")
    suite = tmp_path / "suite.json"
    suite.write_text('{"name": "events", "expectations": []}')
    request = write_request(
        tmp_path / "events.yml", owner="ana@example.com", reason="TEST-22: fast plan",
        target={"table": path_table(str(target)), "partition_column": "dt", "grain": "day"},
        range={"start": "2024-03-09", "end": "2024-03-10"}, time_zone="UTC", strategy="recompute",
        source={"sql": str(sql)}, keys=["id"], expectations=str(suite))
    env = {**os.environ, "BACKFILL_HOME": str(tmp_path / "home"), "BACKFILL_SPARK_MASTER": "local[2]"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "backfill_lib.cli", "plan", str(request)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Backfill plan (dry run: nothing is written)" in done.stdout
    assert "2 x day on dt" in done.stdout  # 2024-03-09 and 2024-03-10
    assert re.search(r"current data in range +\d+ files, .*, 7 rows", done.stdout)  # 3 + 4 target rows in range
    assert done.stderr == "", f"{seconds:.1f} s; stderr: {done.stderr[:3000]}"
    assert list(archive_dir().glob("classes-*.jsa"))  # mapped, or written by this start as its JVM exited
