"""Table names: catalog names ``[catalog.]schema.table`` and path-based Delta tables ``delta.`<path>```. Pure.

A path-based name is how Spark and Delta name a table by its location where there is no catalog entry for it
(EMR without a metastore: ``delta.`s3://bucket/warehouse/orders```). Spark reads it as the two-part identifier
``delta`` + the path, and Delta's catalog resolves it when the path is absolute (Hadoop's ``Path.isAbsolute``:
a path starting with ``/``, after an optional ``scheme:`` and ``//authority``). Inside the back-quotes a
back-quote is doubled, as in any quoted Spark identifier: the path ``/tmp/a`b`` is ``delta.`/tmp/a``b```.

:func:`check_table_name` accepts both forms and returns the canonical spelling (``delta`` lower-case, the path
quoted by :func:`path_table`, trailing slashes dropped), so one table has one name in the plan, the ledger, mart
dependencies and messages. Nothing here touches Spark.
"""

from __future__ import annotations

import hashlib
import re

_CATALOG_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*){0,2}$")
#: ``delta.`<path>``` with back-quotes inside the path doubled (the namespace ``delta`` is case-insensitive, as
#: Delta's catalog compares it)
_PATH_NAME = re.compile(r"^delta\.`((?:[^`]|``)*)`$", re.IGNORECASE)
#: an absolute path: ``/...``, or ``scheme:/...``, or ``scheme://authority/...`` with something after the root
_ABSOLUTE = re.compile(r"^(?:/+|[A-Za-z][A-Za-z0-9+.\-]*:(?:/|//[^/]*/+))[^/]")


def path_table(path: str) -> str:
    """The Spark SQL name of the Delta table at ``path``: ``delta.`<path>``` with each back-quote doubled."""
    return "delta.`" + path.replace("`", "``") + "`"


def table_path(name: str) -> str | None:
    """The path of a path-based table name (``delta.`/data/t``` -> ``/data/t``, doubled back-quotes undone);
    ``None`` for any other name (a catalog name). Does not check the path (see :func:`check_table_name`)."""
    m = _PATH_NAME.match(name.strip())
    return None if m is None else m.group(1).replace("``", "`")


def is_path_table(name: str) -> bool:
    """Whether ``name`` is a path-based table name ``delta.`<path>```."""
    return table_path(name) is not None


def is_absolute_path(path: str) -> bool:
    """Whether ``path`` is absolute as Delta requires of a path-based table: ``/data/t``, ``file:/tmp/t``,
    ``file:///tmp/t``, ``s3://bucket/t``. ``data/t``, ``./t`` and a bare ``s3://bucket`` are not."""
    return bool(_ABSOLUTE.match(path))


def check_table_name(value: str) -> str:
    """The canonical form of ``value`` if it is ``[catalog.]schema.table`` (returned as written) or
    ``delta.`<absolute path>``` (returned as :func:`path_table` of the path without trailing slashes).

    Raises
    ------
    ValueError
        Naming ``value``: not one of the two forms, a path that is empty, relative, or holds a control character
        (a newline would break the one-line messages and reports that name the table).
    """
    path = table_path(value)
    if path is None:
        if value.lower().startswith("delta.`"):
            raise ValueError(f"'{value}' is not a path-based table name: write delta.`<absolute path>`, "
                             "with a back-quote inside the path doubled")
        if not _CATALOG_NAME.match(value):
            raise ValueError(f"'{value}' is not a table name of the form [catalog.]schema.table "
                             "or delta.`<absolute path>`")
        return value
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ValueError(f"{path_table(path)!r}: the path holds a control character")
    if not is_absolute_path(path):
        raise ValueError(f"'{value}': the path '{path}' is not absolute; a path-based table needs an absolute path "
                         "(/data/t, s3://bucket/t, file:/tmp/t)")
    while path.endswith("/") and is_absolute_path(path[:-1]):
        path = path[:-1]
    return path_table(path)


def same_table_key(name: str) -> str:
    """What two spellings of one table share, for comparing names from different places (settings'
    ``protected_tables`` against a request's tables): :func:`check_table_name`'s canonical form lower-cased (as
    Spark compares catalog names; a path differing only in case then counts as the same, the safe side for a
    protection), or ``name`` lower-cased when it is no table name."""
    try:
        return check_table_name(name.strip()).lower()
    except ValueError:
        return name.strip().lower()


#: characters of a path kept in its staging table name (the rest become ``_``)
_UNSAFE = re.compile(r"[^a-z0-9]+")
#: at most this many characters of the path's last segments in a staging table name
SLUG_LENGTH = 40


def path_slug(path: str) -> str:
    """A readable, valid identifier part for ``path``: its last two segments lower-cased, every run of other
    characters than ``a-z0-9`` as one ``_``, cut to :data:`SLUG_LENGTH` characters from the end (the table's own
    directory name is the most telling part); ``path`` if nothing is left."""
    segments = [s for s in path.split("/") if s and not s.endswith(":")]
    slug = _UNSAFE.sub("_", "_".join(segments[-2:]).lower()).strip("_")
    return slug[-SLUG_LENGTH:].lstrip("_") or "path"


def path_staging_table(path: str, staging_schema: str, run_id: str) -> str:
    """``<staging_schema>.path__<slug>__<hash>__<run_id>``: the staging table of the path-based target at
    ``path`` for ``run_id``, a catalog table in the settings' staging schema (the session catalog).

    ``slug`` is :func:`path_slug` (readable); ``hash`` the first 10 hex digits of the SHA-256 of ``path`` as
    :func:`check_table_name` spells it, so two paths whose slugs agree (``/a/x/t`` and ``/b/x/t``,
    ``/data/a b`` and ``/data/a_b``) never share a staging table."""
    digest = hashlib.sha256(path.encode("utf-8")).hexdigest()[:10]
    return f"{staging_schema}.path__{path_slug(path)}__{digest}__{run_id}"
