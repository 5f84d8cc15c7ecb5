"""The shared metastore's JDBC URL (``Settings.metastore_url``): parsed and shown without its password. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

#: PostgreSQL's port when the URL gives none
DEFAULT_PORT = 5432


@dataclass(frozen=True)
class MetastoreUrl:
    """Where a PostgreSQL metastore database answers: ``host``, TCP ``port``, ``database`` name."""

    url: str
    host: str
    port: int
    database: str

    @property
    def shown(self) -> str:
        """The URL as messages print it: the ``password`` parameter's value replaced by ``***``."""
        return redacted(self.url)


def redacted(url: str) -> str:
    """``url`` with the value of any ``password`` parameter (and of a ``user:password@`` part) as ``***``."""
    url = re.sub(r"(?i)([?&;]password=)[^&;]*", r"\1***", url)
    return re.sub(r"//([^/@:]+):[^/@]*@", r"//\1:***@", url)


def parse_metastore_url(url: str) -> MetastoreUrl:
    """Parse ``jdbc:postgresql://HOST[:PORT]/DATABASE[?PARAMS]`` (one host; IPv6 hosts in brackets).

    Raises
    ------
    ValueError
        For any other form (another database, several hosts, no database name), naming what is wrong.
    """
    if not url.startswith("jdbc:postgresql://"):
        raise ValueError(f"{redacted(url)!r} is not a PostgreSQL JDBC URL (jdbc:postgresql://HOST[:PORT]/DATABASE); "
                         "for another metastore set its Spark options (spark.hadoop.javax.jdo.option.*) instead")
    parts = urlsplit(url[len("jdbc:"):])
    if "," in parts.netloc:
        raise ValueError(f"{redacted(url)!r} names several hosts; give one")
    try:
        host, port = parts.hostname, parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise ValueError(f"{redacted(url)!r}: {exc}") from None
    database = parts.path.lstrip("/")
    if not host or not database or "/" in database:
        raise ValueError(f"{redacted(url)!r} needs a host and a database name (jdbc:postgresql://HOST[:PORT]/DATABASE)")
    return MetastoreUrl(url, host, port, database)
