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
    """``url`` with the value of any ``password`` or ``sslpassword`` parameter (up to the next ``&``, as it is
    parsed) and the password of a ``user:password@`` part (up to the last ``@``, wherever the password's own
    characters would end it) as ``***``. Errs on hiding too much."""
    url = re.sub(r"(?i)([?&;](?:ssl)?password=)[^&]*", r"\1***", url)
    return re.sub(r"//([^:/@]*):.*@", r"//\1:***@", url)


def parse_metastore_url(url: str) -> MetastoreUrl:
    """Parse ``jdbc:postgresql://HOST[:PORT]/DATABASE[?PARAMS]`` (one host; IPv6 hosts in brackets).

    Raises
    ------
    ValueError
        For any other form (another database, several hosts, no database name, a bad port, spaces around it),
        naming what is wrong; the message shows the URL as :func:`redacted` does and nothing else of it.
    """
    if url != url.strip():
        raise ValueError(f"{redacted(url.strip())!r} has spaces around it")
    if not url.startswith("jdbc:postgresql://"):
        raise ValueError(f"{redacted(url)!r} is not a PostgreSQL JDBC URL (jdbc:postgresql://HOST[:PORT]/DATABASE); "
                         "for another metastore set its Spark options (spark.hadoop.javax.jdo.option.*) instead")
    invalid = f"{redacted(url)!r} has no valid HOST[:PORT] (a port from 1 to 65535; IPv6 in brackets)"
    try:  # urlsplit's own messages may quote part of the password
        parts = urlsplit(url[len("jdbc:"):])
    except ValueError:
        raise ValueError(invalid) from None
    if "," in parts.netloc:
        raise ValueError(f"{redacted(url)!r} names several hosts; give one")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ValueError(invalid) from None
    if port == 0:
        raise ValueError(invalid)
    database = parts.path.lstrip("/")
    if not host or not database or "/" in database:
        raise ValueError(f"{redacted(url)!r} needs a host and a database name (jdbc:postgresql://HOST[:PORT]/DATABASE)")
    return MetastoreUrl(url, host, port or DEFAULT_PORT, database)
