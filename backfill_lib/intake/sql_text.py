"""Pure checks of request SQL text: one statement, and a query rather than a command. Imports no pyspark.

This is the first of two gates (the second, Spark's own parser, is :func:`backfill_lib.intake.sources.check_query`): it
splits the text into statements the way Spark's lexer does for what matters here (quotes, back-quoted names,
``--`` and nested ``/* */`` comments) so that a file can be refused before Spark starts, with a message saying
what it holds. It is never the only gate: a text it passes is still parsed by Spark as a query and run only
wrapped as a subquery, which a command, a script or several statements cannot parse as.
"""

from __future__ import annotations

import re

#: Words a Spark SQL query can start with (``FROM t SELECT ...`` and ``TABLE t`` are queries too).
QUERY_STARTS = frozenset({"SELECT", "WITH", "VALUES", "FROM", "TABLE"})

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _pieces(text: str):
    """``(kind, start, end)`` pieces of ``text`` in order: ``"comment"`` (``--`` to the line's end, or nested
    ``/* */``), ``"quoted"`` (a string or back-quoted name, quotes included; an unclosed one runs to the end) and
    ``"char"`` (one character outside both), as Spark's lexer sees them."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c == "/" and text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
        elif c in "'\"`":
            raw = c != "`" and i > 0 and text[i - 1] in "rR" and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_"))
            j = i + 1
            while j < n:
                if text[j] == "\\" and c != "`" and not raw:
                    j += 2
                    continue
                if text[j] == c:
                    if c == "`" and text.startswith("``", j):  # a doubled back-quote inside a name
                        j += 2
                        continue
                    break
                j += 1
            j = min(j + 1, n)
            yield "quoted", i, j
            i = j
            continue
        else:
            yield "char", i, i + 1
            i += 1
            continue
        yield "comment", i, j
        i = j


def _scan(text: str) -> tuple[list[str], list[str]]:
    """``text`` split at top-level semicolons: each statement's text (comments kept), and the same with comments,
    quoted strings and names blanked, for finding its leading words. Empty (comment-only) statements are left
    out."""
    statements: list[str] = []
    bare: list[str] = []
    start = 0
    plain: list[str] = []  # the current statement's characters outside comments and quotes
    significant = False

    def close(end: int) -> None:
        nonlocal start, plain, significant
        if significant:
            statements.append(text[start:end].strip())
            bare.append("".join(plain))
        start, plain, significant = end + 1, [], False

    for kind, i, _ in _pieces(text):
        c = text[i]
        if kind == "comment":
            plain.append(" ")
        elif kind == "quoted":
            plain.append(" x ")
            significant = True
        elif c == ";":
            close(i)
        else:
            significant = significant or not c.isspace()
            plain.append(c)
    close(len(text))
    return statements, bare


def leading_words(bare: str, count: int = 2) -> str:
    """The first ``count`` words of a statement (upper case), e.g. ``DROP TABLE``."""
    return " ".join(w.upper() for w in _WORD.findall(bare)[:count])


def single_query(text: str, at: str) -> str:
    """The one statement of ``text`` (trailing semicolons and blank space removed), if it can be a query.

    Parameters
    ----------
    text:
        The content of a source or mart SQL file.
    where:
        What the text is (its file and field), to start the error message with.

    Raises
    ------
    ValueError
        ``"{where}: ..."`` when ``text`` holds no statement, several statements, or one that starts like a
        command or a script (``DROP TABLE``, ``ALTER TABLE``, ``INSERT INTO``, ``BEGIN``...) rather than a query.
    """
    statements, bare = _scan(text)
    if not statements:
        raise ValueError(f"{at}: holds no query (empty, or only comments)")
    first = leading_words(bare[0], 1)
    if first == "BEGIN":
        raise ValueError(f"{at}: holds a SQL script (BEGIN ... END), not a query")
    if len(statements) > 1:
        kinds = ", ".join(leading_words(b, 1) or "?" for b in bare[:5])
        raise ValueError(f"{at}: holds {len(statements)} statements ({kinds}), not one query")
    if first not in QUERY_STARTS and not bare[0].lstrip().startswith("("):
        raise ValueError(f"{at}: holds a statement ({leading_words(bare[0]) or '?'}), not a query")
    return statements[0]


def wrap_query(body: str, alias: str = "_backfill_source") -> str:
    """``body`` as the only subquery of ``SELECT * FROM (...) AS alias``.

    Only a query parses there: a command, a script or several statements make the whole text fail to parse, and
    a body that closes the parenthesis early can only continue the one outer query. The newlines end a ``--``
    comment on the body's last line.
    """
    return f"SELECT * FROM (\n{body}\n) AS {alias}"


def bind_named_parameters(text: str, literals: dict[str, str]) -> str:
    """``text`` with each named parameter ``:name`` of ``literals`` replaced by its SQL literal text (for example
    ``{"range_start": "DATE'2024-03-09'"}``), outside quoted strings, back-quoted names and comments.

    For sessions whose ``spark.sql(text, args=...)`` loses the parameters: under Spark Connect with Delta's SQL
    extension, the server parses the text with Delta's parser, which drops named parameters (delta-io/delta#7640),
    and the query fails as ``UNBOUND_SQL_PARAMETER``. ``::`` (a cast) and names not in ``literals`` are left as
    they are, so Spark still reports an unknown parameter itself.
    """
    out: list[str] = []
    skip = 0  # the end of the parameter name just replaced
    for kind, i, j in _pieces(text):
        if i < skip:
            continue
        if kind == "char" and text[i] == ":" and not text.startswith("::", i) and (i == 0 or text[i - 1] != ":"):
            word = _WORD.match(text, i + 1)
            if word and word.group(0) in literals:
                out.append(literals[word.group(0)])
                skip = word.end()
                continue
        out.append(text[i:j])
    return "".join(out)
