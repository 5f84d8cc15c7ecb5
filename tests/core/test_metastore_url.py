"""The shared metastore's settings: the URL parsed or refused in one line, its password never shown, the Spark
options it gives, and a database that does not answer refused before any JVM starts."""

from __future__ import annotations

import socket
import time

import pytest

from backfill_lib.core.errors import ConfigError, MetastoreError
from backfill_lib.core.metastore_url import parse_metastore_url, redacted
from backfill_lib.core.settings import Settings, load_settings


@pytest.mark.parametrize("url, where", [
    ("jdbc:postgresql://db.example.com/hive", ("db.example.com", 5432, "hive")),
    ("jdbc:postgresql://127.0.0.1:6543/meta?user=u&password=p", ("127.0.0.1", 6543, "meta")),
    ("jdbc:postgresql://[::1]:5433/hive", ("::1", 5433, "hive")),
])
def test_a_postgresql_url_gives_its_host_port_and_database(url, where):
    parsed = parse_metastore_url(url)
    assert (parsed.host, parsed.port, parsed.database) == where


@pytest.mark.parametrize("url, says", [
    ("jdbc:mysql://db/hive", "is not a PostgreSQL JDBC URL"),
    ("jdbc:postgresql://db", "needs a host and a database name"),
    ("jdbc:postgresql://a:5432,b:5432/hive", "names several hosts"),
    ("jdbc:postgresql://db:port/hive", "has no valid HOST"),
    ("jdbc:postgresql://db:0/hive", "has no valid HOST"),
    ("jdbc:postgresql://db/hive ", "has spaces around it"),
])
def test_other_urls_are_refused_naming_what_is_wrong(url, says):
    with pytest.raises(ValueError, match=says):
        parse_metastore_url(url)


def test_the_password_is_never_shown():
    assert redacted("jdbc:postgresql://db/hive?user=u&password=s3cret&ssl=true") == \
        "jdbc:postgresql://db/hive?user=u&password=***&ssl=true"
    assert redacted("jdbc:postgresql://u:s3cret@db/hive") == "jdbc:postgresql://u:***@db/hive"


@pytest.mark.parametrize("url", [  # a fresh helper's: each showed part or all of the password
    "jdbc:postgresql://u:p/SeCrEt@h/db",
    "jdbc:postgresql://u:SeCr?Et@h/db",
    "jdbc:postgresql://u:p@SeCrEt@h:5432/db",
    "jdbc:postgresql://:SeCrEt@h/db",
    "jdbc:postgresql://h/db?user=u&password=a;SeCrEt",
    "jdbc:postgresql://h/db?user=u&sslpassword=SeCrEt",
])
def test_no_part_of_an_odd_password_is_shown_whether_the_url_parses_or_not(url):
    assert "SeCr" not in redacted(url)
    try:
        shown = parse_metastore_url(url).shown
    except ValueError as exc:
        shown = str(exc)
    assert "SeCr" not in shown and "***" in shown


def test_a_bad_url_in_the_settings_file_is_a_config_error_naming_the_field_without_the_password(tmp_path, monkeypatch):
    monkeypatch.delenv("BACKFILL_METASTORE_URL", raising=False)
    path = tmp_path / "settings.yml"
    path.write_text("metastore_url: jdbc:mysql://db/hive?password=s3cret\n")
    with pytest.raises(ConfigError, match=r"settings.yml: field 'metastore_url': .*password=\*\*\*") as raised:
        load_settings(path)
    assert "s3cret" not in str(raised.value)


def test_a_bad_url_in_the_environment_is_blamed_on_the_environment_not_the_file(tmp_path, monkeypatch):
    path = tmp_path / "settings.yml"
    path.write_text("metastore_url: jdbc:postgresql://file/hive\n")
    monkeypatch.setenv("BACKFILL_METASTORE_URL", "jdbc:mysql://env/hive")
    with pytest.raises(ConfigError, match=r"^BACKFILL_METASTORE_URL: 'jdbc:mysql://env/hive' is not a PostgreSQL"):
        load_settings(path)


def test_the_environment_overrides_the_settings_file(tmp_path, monkeypatch):
    path = tmp_path / "settings.yml"
    path.write_text("metastore_url: jdbc:postgresql://file/hive\n")
    monkeypatch.setenv("BACKFILL_METASTORE_URL", "jdbc:postgresql://env:5433/hive")
    assert load_settings(path).metastore_url == "jdbc:postgresql://env:5433/hive"


def test_the_session_reaches_the_database_instead_of_derby_with_no_table_created_lazily(tmp_path):
    from backfill_lib.adapters.session import local_session_options

    settings = Settings(home=tmp_path, metastore_url="jdbc:postgresql://db:5433/hive?user=u")
    options = local_session_options(settings)
    assert options["spark.hadoop.javax.jdo.option.ConnectionURL"] == \
        "jdbc:postgresql://db:5433/hive?user=u&connectTimeout=10&loginTimeout=10"
    assert options["spark.hadoop.javax.jdo.option.ConnectionDriverName"] == "org.postgresql.Driver"
    assert options["spark.hadoop.datanucleus.schema.autoCreateAll"] == "false"
    derby = local_session_options(Settings(home=tmp_path))["spark.hadoop.javax.jdo.option.ConnectionURL"]
    assert derby.startswith("jdbc:derby:")


def test_a_database_that_does_not_answer_is_refused_before_spark_starts(tmp_path):
    from backfill_lib.adapters.metastore import prepare_metastore

    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings = Settings(home=tmp_path, metastore_url=f"jdbc:postgresql://127.0.0.1:{port}/hive?password=s3cret")
    started = time.monotonic()
    with pytest.raises(MetastoreError, match=rf"^metastore_url jdbc:postgresql://127.0.0.1:{port}/hive\?password=\*\*\*: "
                                             rf"no answer from 127.0.0.1:{port} \(waited at most 10 s\)") as raised:
        prepare_metastore(settings, {})
    assert time.monotonic() - started < 11
    assert MetastoreError.exit_code == 2 and "s3cret" not in str(raised.value)
