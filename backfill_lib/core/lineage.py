"""What a run's ledger events mean to OpenLineage, and where its parent run comes from. Pure.

A backfill run and each mart's child run are OpenLineage runs of the job named by the request (a mart's child
request is named ``<request>:<mart table>``). OpenLineage run IDs are UUIDs, so each is derived from the backfill run ID (UUID 5, the same on
every process that reports the run); the backfill run ID itself travels in the ``externalQuery`` run facet.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from backfill_lib.core.errors import ConfigError

#: the ledger status each OpenLineage event type is sent on; other statuses send nothing
EVENT_OF_STATUS = {
    "planned": "START",
    "published": "COMPLETE",
    "unchanged": "COMPLETE",
    "failed": "FAIL",
    "cancelled": "ABORT",
    "abandoned": "ABORT",
}
#: the environment variable that names a parent run, ``namespace/job/run-uuid`` (what Airflow's OpenLineage
#: provider's ``lineage_parent_id`` macro renders, passed to the job it starts)
PARENT_ENV = "OPENLINEAGE_PARENT_ID"
_UUID_NAMESPACE = uuid.UUID("6f0d5b2e-4a51-4c55-9f4e-0b5e7d0c1a2b")


@dataclass(frozen=True)
class ParentRun:
    namespace: str
    job: str
    run_id: str


def lineage_run_id(run_id: str) -> str:
    """The OpenLineage run ID (a UUID string) of backfill run ``run_id``: the same for every event of the run."""
    return str(uuid.uuid5(_UUID_NAMESPACE, run_id))


def parse_parent(text: str, at: str) -> ParentRun:
    """``namespace/job/run-uuid`` as a :class:`ParentRun`; the job name may hold ``/``, the namespace not.

    Raises
    ------
    ConfigError
        Naming ``at`` (the setting or variable) when the text is not in that shape or the run ID is no UUID.
    """
    namespace, _, rest = text.strip().partition("/")
    job, _, run_id = rest.rpartition("/")
    try:
        run_id = str(uuid.UUID(run_id))
    except ValueError:
        run_id = ""
    if not namespace or not job or not run_id:
        raise ConfigError(f"{at}: '{text}' is not a parent run 'namespace/job/run-uuid'")
    return ParentRun(namespace, job, run_id)


def external_parent(setting: str | None, environ=os.environ) -> ParentRun | None:
    """The parent of a backfill run that is not a mart's: ``$OPENLINEAGE_PARENT_ID`` if set, else the settings'
    ``lineage.parent``, else None."""
    if environ.get(PARENT_ENV):
        return parse_parent(environ[PARENT_ENV], PARENT_ENV)
    if setting:
        return parse_parent(setting, "settings lineage.parent")
    return None


def configured_by_environment(environ=os.environ) -> bool:
    """Whether the OpenLineage client would find a transport in the environment (``OPENLINEAGE_URL``,
    ``OPENLINEAGE_CONFIG`` or ``OPENLINEAGE__TRANSPORT...`` variables)."""
    return bool(environ.get("OPENLINEAGE_URL") or environ.get("OPENLINEAGE_CONFIG")
                or any(k.startswith("OPENLINEAGE__TRANSPORT") for k in environ))
