"""Settings: where the embedded default keeps its files, the session time zone, schema names, Spark options.

Loaded from ``conf/settings.yml`` (or the file named by ``--settings`` / ``BACKFILL_SETTINGS``). The
local folder can be moved with ``BACKFILL_HOME``, the local master with ``BACKFILL_SPARK_MASTER`` and the
metastore with ``BACKFILL_METASTORE_URL``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from backfill_lib.core.errors import ConfigError
from backfill_lib.core.safe_yaml import load as load_yaml

DEFAULT_SETTINGS_PATH = Path("conf/settings.yml")
HOME_ENV = "BACKFILL_HOME"
SETTINGS_ENV = "BACKFILL_SETTINGS"
MASTER_ENV = "BACKFILL_SPARK_MASTER"
METASTORE_ENV = "BACKFILL_METASTORE_URL"

#: Source input per batch when batches are sized by bytes: large enough that a batch's fixed cost (a Spark job,
#: a staging commit, a ledger event; about a second locally) is small beside its work, small enough that a
#: failed or resumed batch redoes little.
DEFAULT_BATCH_BYTES = 512 * 2**20


class SparkSettings(BaseModel):
    """How the local embedded session is built; ignored on clusters, where the active session is reused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    master: str = "local[*]"
    app_name: str = "delta-backfill"
    options: dict[str, str] = Field(default_factory=dict)

    @field_validator("options", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        if isinstance(value, dict):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value


class LineageSettings(BaseModel):
    """Where OpenLineage events go (:mod:`backfill_lib.adapters.lineage`).

    Attributes
    ----------
    transport:
        The OpenLineage client's ``transport`` configuration, as in its ``openlineage.yml`` (for example
        ``{type: http, url: http://marquez:5000}`` or ``{type: file, log_file_path: /tmp/ol.jsonl, append: true}``).
        Unset: the client's own environment (``OPENLINEAGE_URL``, ``OPENLINEAGE__TRANSPORT__...``,
        ``OPENLINEAGE_CONFIG``); with neither, nothing is sent.
    namespace:
        The jobs' namespace.
    dataset_namespace:
        The namespace of the tables read and written (their names are the catalog names).
    parent:
        ``namespace/job/run-uuid`` of the run that started backfills (``$OPENLINEAGE_PARENT_ID`` wins).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    transport: dict | None = None
    namespace: str = "delta-backfill"
    dataset_namespace: str = "spark_catalog"
    parent: str | None = None


class Settings(BaseModel):
    """Project settings.

    Attributes
    ----------
    home:
        The one project-local folder of the embedded default: ``warehouse/`` (Delta tables),
        ``metastore_db/`` (embedded Derby metastore) and ``runs/`` (per-run reports) live under it.
        Relative paths resolve against the working directory.
    time_zone:
        IANA zone set as ``spark.sql.session.timeZone`` when the session is taken; a run switches the session
        to its request's ``time_zone`` while it runs (:func:`backfill_lib.adapters.session.session_time_zone`).
    staging_schema, ledger_schema:
        Catalog schemas (databases) holding staging tables and the ledger tables.
    batch_size:
        Default number of partitions staged by one Spark job; unset (``null``), batches are sized by bytes.
    batch_bytes:
        When neither request nor settings fix ``batch_size``: bytes of source input per batch (the source's
        input files over the range, spread evenly over its partitions; see :func:`backfill_lib.plan.model.batch_partitions`).
    concurrency:
        Default number of batches staged at once (concurrent Spark jobs in the FAIR pool ``backfill``).
    conflict_attempts, retry_base_seconds, retry_max_seconds:
        A write that meets a Delta commit conflict is tried at most ``conflict_attempts`` times in all, waiting
        ``min(retry_max_seconds, retry_base_seconds * 2**(n-1))`` seconds (times a random 0.5-1) after failure n.
    protected_tables:
        Tables a run may publish to (as target or mart) only with ``--approve NAME``; the approver is recorded
        in the ledger and in the commit's ``userMetadata``.
    lease_hours, lease_poll_seconds:
        A run holds its table's range until it is final (:mod:`backfill_lib.core.leases`); its lease expires when
        the run recorded nothing for ``lease_hours`` (a crash nobody resumed). ``backfill run --after RUN_ID``
        checks every ``lease_poll_seconds`` whether that run is final.
    cleanup_older_than:
        ``backfill cleanup``'s default age (``30d``, ``12h``): staging tables of final runs whose last event is older
        go (:mod:`backfill_lib.core.retention`).
    lineage:
        OpenLineage events (:class:`LineageSettings`); unset, only the client's environment configures them.
    staging:
        Where a run's validated rows wait for the publish commit when its request does not say:
        ``durable`` (a staging Delta table per run), ``pinned`` (held by the run's Spark session and written
        once, by the publish commit) or ``auto`` (the default: pinned for a run of one batch that goes straight
        through, durable otherwise; see :func:`backfill_lib.core.staging_mode.staging_mode`).
    metastore_url:
        The embedded default only: a shared Hive metastore database instead of the one-process Derby metastore
        under ``home``, as a PostgreSQL JDBC URL (``jdbc:postgresql://HOST[:PORT]/DATABASE?user=U&password=P``).
        Several ``backfill`` processes (on one machine, or on several sharing the warehouse's file system) can
        then run, watch and abandon backfills side by side; ``backfill`` creates the metastore's tables on first
        use (:mod:`backfill_lib.adapters.metastore`). ``BACKFILL_METASTORE_URL`` overrides it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Path(".backfill")
    time_zone: str = "UTC"
    staging_schema: str = "backfill_staging"
    ledger_schema: str = "backfill_ledger"
    batch_size: int | None = Field(default=None, ge=1)
    batch_bytes: int = Field(default=DEFAULT_BATCH_BYTES, ge=1)
    concurrency: int = Field(default=2, ge=1, le=64)
    conflict_attempts: int = Field(default=5, ge=1)
    retry_base_seconds: float = Field(default=0.5, ge=0)
    retry_max_seconds: float = Field(default=8.0, ge=0)
    protected_tables: tuple[str, ...] = ()
    lease_hours: float = Field(default=24.0, gt=0)
    lease_poll_seconds: float = Field(default=10.0, gt=0)
    cleanup_older_than: str = "30d"
    lineage: LineageSettings = Field(default_factory=LineageSettings)
    staging: Literal["auto", "durable", "pinned"] = "auto"
    metastore_url: str | None = None

    @field_validator("metastore_url")
    @classmethod
    def _a_postgresql_url(cls, value: str | None) -> str | None:
        if value is not None:
            from backfill_lib.core.metastore_url import parse_metastore_url

            parse_metastore_url(value)
        return value

    @field_validator("cleanup_older_than")
    @classmethod
    def _an_age(cls, value: str) -> str:
        from backfill_lib.core.retention import parse_age

        try:
            parse_age(value, "cleanup_older_than")
        except Exception as exc:
            raise ValueError(str(exc)) from None
        return value
    spark: SparkSettings = Field(default_factory=SparkSettings)

    @property
    def warehouse_dir(self) -> Path:
        return self.home.resolve() / "warehouse"

    @property
    def metastore_dir(self) -> Path:
        return self.home.resolve() / "metastore_db"

    @property
    def runs_dir(self) -> Path:
        return self.home.resolve() / "runs"


def load_settings(path: str | Path | None = None) -> Settings:
    """Load settings, then apply the environment overrides.

    Parameters
    ----------
    path:
        The YAML file. ``None`` means ``$BACKFILL_SETTINGS`` if set, else ``conf/settings.yml`` if it exists,
        else the built-in defaults of :class:`Settings`.

    Raises
    ------
    ConfigError
        When a named file is missing, is not YAML, or has a bad field (the message names file and field).
    """
    explicit = path is not None or SETTINGS_ENV in os.environ
    chosen = Path(path or os.environ.get(SETTINGS_ENV) or DEFAULT_SETTINGS_PATH)
    data: dict = {}
    if chosen.exists():
        try:
            data = load_yaml(chosen.read_bytes().decode("utf-8")) or {}
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{chosen}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                              f"{exc.start})") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{chosen}: not valid YAML: {str(exc).splitlines()[0]}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{chosen}: expected a mapping of settings, got {type(data).__name__}")
    elif explicit:
        raise ConfigError(f"{chosen}: settings file not found")
    if HOME_ENV in os.environ:
        data = {**data, "home": os.environ[HOME_ENV]}
    if os.environ.get(METASTORE_ENV):
        from backfill_lib.core.metastore_url import parse_metastore_url

        try:
            parse_metastore_url(os.environ[METASTORE_ENV])
        except ValueError as exc:
            raise ConfigError(f"{METASTORE_ENV}: {exc}") from None
        data = {**data, "metastore_url": os.environ[METASTORE_ENV]}
    if MASTER_ENV in os.environ:
        data = {**data, "spark": {**(data.get("spark") or {}), "master": os.environ[MASTER_ENV]}}
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        # not chained: pydantic's text quotes the input, which may hold a password (metastore_url)
        raise ConfigError(f"{chosen}: field '{field}': {err['msg']}") from None


def enter_project_dir(folder: str | None) -> None:
    """Change the working directory to ``folder`` (None: stay): ``--project-dir``, where relative paths of
    requests, their SQL and suites and of the settings file resolve.

    Raises
    ------
    ConfigError
        ``folder`` is not an existing directory.
    """
    if folder is None:
        return
    if not os.path.isdir(folder):
        raise ConfigError(f"--project-dir {folder}: not an existing folder")
    os.chdir(folder)
