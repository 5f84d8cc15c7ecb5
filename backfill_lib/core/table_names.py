"""Table names: catalog names ``[catalog.]schema.table`` and path-based Delta tables ``delta.`<path>```. Pure.

A catalog name's parts are plain words (``sales.orders``) or back-quoted as in Spark SQL, a back-quote inside
doubled: ``sales.`order-lines```, ```my-cat`.sales.orders``, ``sales.`a.b``` (a dot inside a quoted part does not
split it), ``sales.`select``` (a reserved word). :func:`check_table_name` spells such a name one way
(:func:`catalog_table`): a part is back-quoted exactly when it needs it (it is not ``[A-Za-z_][A-Za-z0-9_]*``, or
it is a word Spark reserves under ``spark.sql.ansi.enforceReservedKeywords``), so ``sales.orders`` stays as
written and ``sales.`orders``` becomes ``sales.orders``. Case is kept as written: Spark's catalogs compare names
case-insensitively, so comparisons go through :func:`same_table_key` (lower-cased) and staging names through a
lower-cased hash, never through the spelling.

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

#: a part that needs no back-quotes (when it is no reserved word)
_PLAIN_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: one part of a catalog name: a plain ASCII word (as Spark reads unquoted), or back-quoted with back-quotes inside doubled
_PART = re.compile(r"`((?:[^`]|``)*)`|([A-Za-z_][A-Za-z0-9_]*)")
#: the words Spark SQL reserves when ``spark.sql.ansi.enforceReservedKeywords`` is on (``sql_keywords()`` of
#: Spark 4.1); back-quoted in a canonical name so it reads under either setting
RESERVED_WORDS = frozenset("""
    ALL AND ANY AS AUTHORIZATION BOTH CALL CASE CAST CHECK COLLATE COLLATION COLUMN CONSTRAINT CREATE CROSS
    CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP CURRENT_USER DISTINCT ELSE END ESCAPE EXCEPT EXECUTE FALSE FETCH
    FILTER FOR FOREIGN FROM FULL GRANT GROUP HAVING IN INNER INTERSECT INTO IS JOIN LATERAL LEADING LEFT NATURAL
    NOT NULL OFFSET ON ONLY OR ORDER OUTER OVERLAPS PRIMARY RECURSIVE REFERENCES RIGHT SELECT SESSION_USER SOME SQL
    TABLE THEN TIME TO TRAILING UNION UNIQUE UNKNOWN USER USING WHEN WHERE WITH WITHIN
""".split())
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


def quote_part(part: str) -> str:
    """``part`` of a catalog name as a canonical name spells it: as is when it is ``[A-Za-z_][A-Za-z0-9_]*`` and no
    reserved word (:data:`RESERVED_WORDS`), otherwise back-quoted with each back-quote doubled."""
    if _PLAIN_PART.fullmatch(part) and part.upper() not in RESERVED_WORDS:
        return part
    return "`" + part.replace("`", "``") + "`"


def catalog_table(parts: list[str] | tuple[str, ...]) -> str:
    """The canonical name of the catalog table with name ``parts`` (unquoted, as Spark's parser gives them):
    ``["sales", "order-lines"]`` -> ``sales.`order-lines```; each part through :func:`quote_part`."""
    return ".".join(quote_part(p) for p in parts)


def split_table_name(value: str) -> list[str] | None:
    """The parts of catalog name ``value``, unquoted (``sales.`a.b``` -> ``["sales", "a.b"]``, doubled
    back-quotes undone); ``None`` when ``value`` is not a dot-separated list of plain or back-quoted parts (an
    empty part, a space outside back-quotes, an unclosed back-quote). Does not limit the number of parts."""
    parts, pos = [], 0
    while True:
        m = _PART.match(value, pos)
        if m is None:
            return None
        parts.append(m.group(1).replace("``", "`") if m.group(1) is not None else m.group(2))
        pos = m.end()
        if pos == len(value):
            return parts
        if value[pos] != ".":
            return None
        pos += 1


def check_table_name(value: str) -> str:
    """The canonical form of ``value`` if it is ``[catalog.]schema.table`` (each part plain or back-quoted;
    returned as :func:`catalog_table` spells its parts, so a plain name as written) or ``delta.`<absolute path>```
    (returned as :func:`path_table` of the path without trailing slashes).

    Raises
    ------
    ValueError
        Naming ``value``: not one of the two forms (an unquoted part other than ``[A-Za-z_][A-Za-z0-9_]*``, a
        part holding ``/``: ``parquet.`/data/t``` reads files), a part that is empty or holds a control character,
        a path that is empty, relative, or holds a control character (a newline would break the one-line messages
        and reports that name the table).
    """
    path = table_path(value)
    if path is None:
        if value.lower().startswith("delta.`"):
            raise ValueError(f"'{value}' is not a path-based table name: write delta.`<absolute path>`, "
                             "with a back-quote inside the path doubled")
        parts = split_table_name(value)
        if parts is None or not 1 <= len(parts) <= 3:
            raise ValueError(f"'{value}' is not a table name of the form [catalog.]schema.table "
                             "or delta.`<absolute path>` (quote a part with back-quotes: sales.`order-lines`)")
        canonical = catalog_table(parts)
        if table_path(canonical) is not None:  # `delta`.`/data/t` is the path-based name delta.`/data/t` to Spark
            return check_table_name(canonical)
        if any("/" in part for part in parts):  # parquet.`/data/t` is a file query to Spark, not a table
            raise ValueError(f"'{value}' is not a table name of the form [catalog.]schema.table or "
                             "delta.`<absolute path>` (a part holding '/' reads files: name a Delta table by its "
                             "path as delta.`<absolute path>`)")
        for part in parts:
            if not part:
                raise ValueError(f"'{value}': a back-quoted name part is empty")
            if any(ord(c) < 32 or ord(c) == 127 for c in part):
                raise ValueError(f"'{value}': a name part holds a control character")
        return canonical
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


def catalog_staging_table(name: str, staging_schema: str, run_id: str) -> str:
    """``[catalog.]<staging_schema>.<flat>__<run_id>``: the staging table of catalog table ``name`` (canonical, see
    :func:`check_table_name`) for ``run_id``, in the target's catalog.

    ``flat`` is ``<schema>__<table>`` when both are plain words (``sales.orders`` -> ``sales__orders``, as always;
    a reserved word is fine inside it); otherwise ``q__<slug>__<hash>``: ``slug`` the parts lower-cased, every run
    of other characters than ``a-z0-9`` as one ``_`` (cut to :data:`SLUG_LENGTH`), ``hash`` the first 10 hex
    digits of the SHA-256 of ``schema.table`` canonically spelt and lower-cased (Spark's catalogs ignore case), so
    ``sales.`a-b``` and ``sales.`a b``` never share a staging table. The catalog part is kept as spelt."""
    parts = split_table_name(name)
    if parts is None or not 1 <= len(parts) <= 3:
        raise ValueError(f"'{name}' is not a catalog table name")
    catalog = quote_part(parts[0]) + "." if len(parts) == 3 else ""
    tail = parts[-2:]
    if all(_PLAIN_PART.fullmatch(p) for p in tail):
        flat = "__".join(tail)
    else:
        digest = hashlib.sha256(catalog_table(tail).lower().encode("utf-8")).hexdigest()[:10]
        slug = _UNSAFE.sub("_", "__".join(tail).lower()).strip("_")[-SLUG_LENGTH:].lstrip("_") or "name"
        flat = f"q__{slug}__{digest}"
    return f"{catalog}{staging_schema}.{flat}__{run_id}"


def location_key(location: str) -> str:
    """``location`` without a trailing slash and with ``file:///`` written ``file:/``: what two spellings of one
    Delta directory share."""
    location = location.rstrip("/")
    return "file:/" + location[len("file:///"):] if location.startswith("file:///") else location


def location_spellings(location: str) -> list[str]:
    """The spellings of ``location`` that :func:`location_key` folds together (for an SQL ``IN`` filter)."""
    bare = location_key(location)
    forms = {bare, bare.replace("file:/", "file:///", 1) if bare.startswith("file:/") else bare}
    return sorted(forms | {form + "/" for form in forms})


def same_location(a: str | None, b: str | None) -> bool:
    """Whether two Delta locations (``file:/x/``, ``file:///x``) name one directory; ``False`` when either is
    ``None`` or empty."""
    return bool(a) and bool(b) and location_key(a) == location_key(b)
