"""The embedded default's local file systems: Hadoop's answers, without a chmod or readlink process per call."""

from __future__ import annotations

import os
import stat
import zipfile

import pytest

from backfill_lib.adapters import local_fs


def _hadoop(spark):
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return jvm, conf, jvm.org.apache.hadoop.fs.FileSystem.getLocal(conf)


def test_the_local_session_writes_through_the_quiet_file_systems(spark, tmp_path):
    jvm, conf, fs = _hadoop(spark)
    assert fs.getClass().getName() == local_fs.QUIET_FILE_SYSTEM
    context = jvm.org.apache.hadoop.fs.FileContext.getLocalFSFileContext(conf)
    assert context.getDefaultFileSystem().getClass().getName() == local_fs.QUIET_ABSTRACT_FILE_SYSTEM

    table = tmp_path / "t"
    spark.createDataFrame([(1, "a"), (2, "b")], "id INT, p STRING").write.format("delta").partitionBy("p").save(
        str(table))
    # the modes Hadoop's chmod gave them (its umask setting, fs.permissions.umask-mode, is 022): 0644 and 0755
    data = next((table / "p=a").glob("part-*.parquet"))
    assert stat.S_IMODE(data.stat().st_mode) == 0o644
    assert stat.S_IMODE((table / "p=a").stat().st_mode) == 0o755
    assert (table / "p=a" / f".{data.name}.crc").exists()
    assert (table / "_delta_log" / "00000000000000000000.json").exists()
    assert sorted(r.id for r in spark.read.format("delta").load(str(table)).collect()) == [1, 2]


@pytest.mark.parametrize("mode", [0o640, 0o600, 0o751, 0o1755])
def test_set_permission_sets_exactly_the_mode_asked(spark, tmp_path, mode):
    jvm, _, fs = _hadoop(spark)
    target = tmp_path / "f"
    target.mkdir() if mode & 0o1000 else target.write_text("x")
    fs.setPermission(jvm.org.apache.hadoop.fs.Path(target.as_uri()),
                     jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(mode))
    assert stat.S_IMODE(target.stat().st_mode) == mode  # the sticky bit through Hadoop's own chmod


def test_link_status_tells_a_link_from_a_file(spark, tmp_path):
    jvm, _, fs = _hadoop(spark)
    Path = jvm.org.apache.hadoop.fs.Path
    (tmp_path / "file").write_text("abc")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    plain = fs.getFileLinkStatus(Path(str(tmp_path / "file")))
    assert not plain.isSymlink() and plain.getLen() == 3
    linked = fs.getFileLinkStatus(Path(str(tmp_path / "link")))
    assert linked.isSymlink() and linked.getSymlink().toUri().getPath() == str(tmp_path / "file")


def test_no_quiet_file_system_when_the_settings_choose_one_or_the_cache_is_off(monkeypatch):
    assert local_fs.quiet_local_fs_options({local_fs.FILE_SYSTEM: "org.apache.hadoop.fs.LocalFileSystem"}) == {}
    monkeypatch.setenv("BACKFILL_JVM_ARCHIVE", "off")
    assert local_fs.quiet_local_fs_options({}) == {}


def test_the_jar_is_built_once_into_the_cache_folder_and_joins_the_class_path(monkeypatch, tmp_path):
    monkeypatch.setenv("BACKFILL_JVM_ARCHIVE", str(tmp_path / "jvm"))
    options = local_fs.quiet_local_fs_options({local_fs.CLASS_PATH: "/opt/extra.jar"})
    jar = local_fs.jar_path(tmp_path / "jvm")
    assert options == {local_fs.FILE_SYSTEM: local_fs.QUIET_FILE_SYSTEM,
                       local_fs.ABSTRACT_FILE_SYSTEM: local_fs.QUIET_ABSTRACT_FILE_SYSTEM,
                       local_fs.CLASS_PATH: f"/opt/extra.jar{os.pathsep}{jar}"}
    assert stat.S_IMODE(jar.stat().st_mode) == 0o600
    with zipfile.ZipFile(jar) as z:
        assert sorted(z.namelist()) == ["deltabackfill/hadoop/QuietLocalFileSystem.class",
                                        "deltabackfill/hadoop/QuietLocalFs$Raw.class",
                                        "deltabackfill/hadoop/QuietLocalFs.class",
                                        "deltabackfill/hadoop/QuietRawLocalFileSystem.class"]
    built = jar.stat().st_mtime_ns
    assert local_fs.quiet_local_fs_options({})[local_fs.CLASS_PATH] == str(jar)
    assert jar.stat().st_mtime_ns == built  # the second start maps the first's jar
