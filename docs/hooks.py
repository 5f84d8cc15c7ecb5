"""MkDocs hook: the reference pages are generated from the code at build time, so they cannot drift from it.

A page asks for a generated block with an HTML comment on a line of its own, ``<!-- generated: NAME -->``:

- ``request``: the request reference, from ``BackfillRequest.model_json_schema()``
  (``backfill_lib/intake/request.py``), with each field's type, default and description; descriptions come from
  the schema (the models' docstrings, ``Field(description=...)``), the ``#:`` comment above a field, or a
  numpy-style ``Parameters`` section of the model's docstring.
- ``cli``: every command of the typer app (``backfill_lib/cli.py``), from ``typer.main.get_command(app)``.
- ``errors``: the ``BackfillError`` classes of ``backfill_lib/core/errors.py``, their exit codes and docstrings.
- ``json-schema``: the shipped ``backfill_lib/schemas/backfill-output-v1.schema.json``, definition by definition.
- ``settings``: the settings model ``Settings`` (``backfill_lib/core/settings.py``), as the request.
- ``settings-file``: ``conf/settings.yml`` as it is.
- ``import-layers``: the layers of ``[tool.importlinter]`` in ``pyproject.toml``.

An unknown name, or a generator that fails, fails the build.

A page with a generated block also tells a reader of its Markdown source (on GitHub, where nothing is generated)
how to see the full page, between the lines ``<!-- source-note -->`` and ``<!-- /source-note -->``; the hook
removes that note, both lines included, from the built page. A note left open fails the build.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
SOURCE_NOTE = re.compile(r"^<!-- source-note -->\n.*?^<!-- /source-note -->\n?", re.MULTILINE | re.DOTALL)


# --- JSON Schema as Markdown tables ---------------------------------------------------------------------------


def _cell(text: str) -> str:
    """One table cell: a single line, pipes escaped, reST double back-quotes made Markdown code."""
    text = _code_spans(text)
    text = " ".join(text.split())
    return text.replace("|", "\\|")


def _type(prop: dict, anchor_prefix: str) -> str:
    """A property's type as Markdown: ``string``, ``integer ≥ 1``, a link to a definition, ``list of ...``."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{anchor_prefix}{name.lower()})"
    if "anyOf" in prop or "oneOf" in prop:
        options = [o for o in prop.get("anyOf", prop.get("oneOf")) if o.get("type") != "null"]
        text = " or ".join(_type(o, anchor_prefix) for o in options)
        nullable = len(options) < len(prop.get("anyOf", prop.get("oneOf")))
        return text + (" or null" if nullable else "")
    if "enum" in prop:
        return " or ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    kind = prop.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array":
        if "prefixItems" in prop:
            kind = "[" + ", ".join(_type(i, anchor_prefix) for i in prop["prefixItems"]) + "]"
        else:
            kind = "list of " + _type(prop.get("items", {}), anchor_prefix)
    elif kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        kind = "map of " + _type(prop["additionalProperties"], anchor_prefix)
    if "format" in prop:
        kind += f" ({prop['format']})"
    bounds = []
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in prop:
            bounds.append(f"{sign} {prop[key]}")
    if "minLength" in prop:
        bounds.append(f"at least {prop['minLength']} character(s)")
    if "minItems" in prop:
        bounds.append(f"at least {prop['minItems']} item(s)")
    return kind + (" (" + ", ".join(bounds) + ")" if bounds else "")


def _default(prop: dict, required: bool) -> str:
    if required:
        return "**required**"
    if "default" in prop:
        return f"`{json.dumps(prop['default'])}`"
    if "$ref" in prop:
        return "its fields' defaults"
    return ""


def _first_sentence(text: str) -> str:
    """The first sentence of a docstring (up to its first colon when that sentence is long)."""
    text = " ".join(_strip_parameters(text).split())
    sentence = re.split(r"(?<=\.)\s", text, maxsplit=1)[0]
    if len(sentence) > 200 and ":" in sentence:
        sentence = sentence.split(":", 1)[0] + "."
    return sentence


def _referenced(prop: dict) -> str | None:
    """The definition a property refers to, directly, as a list's items or as a nullable option."""
    for candidate in [prop, prop.get("items", {}), *prop.get("anyOf", [])]:
        if "$ref" in candidate:
            return candidate["$ref"].rsplit("/", 1)[-1]
        if "$ref" in candidate.get("items", {}):
            return candidate["items"]["$ref"].rsplit("/", 1)[-1]
    return None


def _object_table(
    schema: dict, anchor_prefix: str, notes: dict[str, str] | None = None, defs: dict | None = None
) -> list[str]:
    notes = notes or {}
    defs = defs or {}
    required = set(schema.get("required", ()))
    lines = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        description = prop.get("description") or notes.get(name, "")
        ref = _referenced(prop)
        if not description and ref in defs:
            description = _first_sentence(defs[ref].get("description", ""))
        lines.append(
            f"| `{name}` | {_cell(_type(prop, anchor_prefix))} | {_default(prop, name in required)} "
            f"| {_cell(description)} |"
        )
    return lines


def _definition(
    name: str, schema: dict, anchor_prefix: str, notes: dict[str, str], level: str, defs: dict
) -> list[str]:
    lines = [f"{level} {name} {{#{anchor_prefix}{name.lower()}}}", ""]
    description = _strip_parameters(schema.get("description", ""))
    if description:
        lines += [_rst_to_md(description), ""]
    if "properties" in schema:
        lines += _object_table(schema, anchor_prefix, notes, defs) + [""]
    elif "enum" in schema:
        lines += ["One of: " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
    return lines


def _rst_to_md(text: str) -> str:
    return _code_spans(textwrap.dedent(text).strip())


def _code_spans(text: str) -> str:
    """reST inline literals (``x``) and roles (:func:`x`) as Markdown code spans; a literal that holds a
    back-quote becomes a double-back-quoted span."""
    def literal(match: re.Match) -> str:
        content = " ".join(match.group(1).split())
        return f"`` {content} ``" if "`" in content else f"`{content}`"

    text = re.sub(r"``(.+?)``(?!`)", literal, text, flags=re.S)
    return re.sub(r":(?:func|class|mod|attr|meth):`~?([^`]+)`", r"`\1`", text)


def _strip_parameters(doc: str) -> str:
    """A docstring without its numpy-style ``Parameters`` / ``Raises`` sections (they become field descriptions)."""
    return re.split(r"\n\s*(?:Parameters|Attributes|Raises|Returns)\n\s*-{3,}\n", doc)[0]


# --- descriptions the schema lacks: `#:` comments and numpy Parameters sections --------------------------------


def _field_notes(cls: type) -> dict[str, str]:
    """Field name -> description from the ``#:`` comment lines right above each field of ``cls`` and from a
    numpy-style ``Parameters`` section of its docstring (``a, b : type`` then indented text)."""
    notes: dict[str, str] = {}
    doc = inspect.getdoc(cls) or ""
    match = re.search(
        r"\n\s*(?:Parameters|Attributes)\n\s*-{3,}\n(.*?)(?:\n\s*\n\s*\w+\n\s*-{3,}|\Z)", "\n" + doc, re.S
    )
    if match:
        current: list[str] = []
        text: list[str] = []
        for line in match.group(1).splitlines():
            if line and not line.startswith(" ") and (" : " in line or line.rstrip().endswith(":")):
                for n in current:
                    notes[n] = " ".join(text)
                current = [n.strip() for n in line.rstrip().rstrip(":").split(" : ")[0].split(",")]
                text = []
            elif line.strip():
                text.append(line.strip())
        for n in current:
            notes[n] = " ".join(text)
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return notes
    lines = source.splitlines()
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            comment: list[str] = []
            i = node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#:"):
                comment.insert(0, lines[i].strip()[2:].strip())
                i -= 1
            if comment:
                notes[node.target.id] = " ".join(comment)
    return notes


def _models(root: type) -> dict[str, type]:
    """Every pydantic model and enum reachable from ``root``'s fields, by class name."""
    import enum
    import typing

    from pydantic import BaseModel

    found: dict[str, type] = {}

    def visit(tp: object) -> None:
        for arg in typing.get_args(tp):
            visit(arg)
        if isinstance(tp, type) and (issubclass(tp, BaseModel) or issubclass(tp, enum.Enum)):
            if tp.__name__ in found:
                return
            found[tp.__name__] = tp
            if issubclass(tp, BaseModel):
                for info in tp.model_fields.values():
                    visit(info.annotation)

    visit(root)
    return found


def request_reference() -> str:
    from backfill_lib.intake.request import BackfillRequest

    schema = BackfillRequest.model_json_schema()
    models = _models(BackfillRequest)
    prefix = "request-"
    lines = [f"## BackfillRequest {{#{prefix}backfillrequest}}", ""]
    lines += [_rst_to_md(inspect.getdoc(BackfillRequest) or ""), ""]
    defs = schema.get("$defs", {})
    lines += _object_table(schema, prefix, _field_notes(BackfillRequest), defs) + [""]
    for name, definition in sorted(schema.get("$defs", {}).items()):
        notes = _field_notes(models[name]) if name in models else {}
        lines += _definition(name, definition, prefix, notes, "###", defs)
    return "\n".join(lines)


def json_schema_reference() -> str:
    path = ROOT / "backfill_lib" / "schemas" / "backfill-output-v1.schema.json"
    schema = json.loads(path.read_text())
    prefix = "json-"
    lines = [f"Generated from `{path.relative_to(ROOT)}` ({schema.get('title', '')}).", ""]
    kinds = [o["$ref"].rsplit("/", 1)[-1] for o in schema.get("oneOf", [])]
    if kinds:
        lines += ["A document is one of: " + ", ".join(f"[{k}](#{prefix}{k.lower()})" for k in kinds) + ".", ""]
    defs = schema.get("$defs", {})
    for name, definition in sorted(defs.items()):
        lines += _definition(name, definition, prefix, {}, "###", defs)
    return "\n".join(lines)


# --- the CLI ---------------------------------------------------------------------------------------------------


def _param_row(param, ctx) -> str:
    if param.param_type_name == "argument":
        name = f"`{param.name.upper()}`"
        kind = "argument"
    else:
        name = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        kind = "flag" if getattr(param, "is_flag", False) else param.display_type(ctx).strip("<>")
    default = param.default
    if param.required:
        shown = "**required**"
    elif default not in (None, False, ()) and not callable(default):
        shown = f"`{default}`"
    else:
        shown = ""
    return f"| {name} | {kind} | {shown} | {_cell(getattr(param, 'help', None) or '')} |"


def _usage(command, prefix: str) -> str:
    pieces = [prefix]
    if any(p.param_type_name == "option" for p in command.params):
        pieces.append("[OPTIONS]")
    for p in command.params:
        if p.param_type_name == "argument":
            pieces.append(p.name.upper() if p.required else f"[{p.name.upper()}]")
    return " ".join(pieces)


def _command_section(name: str, command, parent: str) -> list[str]:
    from typer._click import Context

    ctx = Context(command, info_name=name)
    lines = [f"### `{parent} {name}`", ""]
    if command.help:
        lines += [_rst_to_md(inspect.cleandoc(command.help)), ""]
    lines += ["```text", _usage(command, f"{parent} {name}"), "```", ""]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    if params:
        lines += ["| parameter | type | default | help |", "|---|---|---|---|"]
        lines += [_param_row(p, ctx) for p in params] + [""]
    return lines


def cli_reference() -> str:
    import typer

    from backfill_lib.cli import app

    from typer._click import Context

    group = typer.main.get_command(app)
    ctx = Context(group, info_name="backfill")
    lines = ["## Global options", "", "Given before the command (`backfill --settings FILE run ...`).", ""]
    if group.help:
        lines += [_rst_to_md(group.help), ""]
    lines += ["| parameter | type | default | help |", "|---|---|---|---|"]
    lines += [_param_row(p, ctx) for p in group.params if not getattr(p, "hidden", False)] + ["", "## Commands", ""]
    for name, command in group.commands.items():
        lines += _command_section(name, command, "backfill")
    return "\n".join(lines)


# --- errors, settings, import layers ---------------------------------------------------------------------------


def errors_reference() -> str:
    from backfill_lib.core import errors

    classes = [
        c for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, errors.BackfillError) and c.__module__ == errors.__name__
    ]
    classes.sort(key=lambda c: (c.exit_code, [k.__name__ for k in reversed(c.__mro__)]))
    lines = ["| error class | exit code | parent | meaning |", "|---|---|---|---|"]
    for c in classes:
        parent = c.__mro__[1].__name__ if c is not errors.BackfillError else "Exception"
        doc = _strip_parameters(inspect.getdoc(c) or "")
        lines.append(f"| `{c.__name__}` | {c.exit_code} | `{parent}` | {_cell(doc)} |")
    return "\n".join(lines)


def settings_reference() -> str:
    from backfill_lib.core.settings import Settings

    schema = Settings.model_json_schema()
    models = _models(Settings)
    prefix = "settings-"
    defs = schema.get("$defs", {})
    lines = [f"### Settings {{#{prefix}settings}}", ""]
    lines += _object_table(schema, prefix, _field_notes(Settings), defs) + [""]
    for name, definition in sorted(defs.items()):
        notes = _field_notes(models[name]) if name in models else {}
        lines += _definition(name, definition, prefix, notes, "###", defs)
    return "\n".join(lines)


def settings_file() -> str:
    path = ROOT / "conf" / "settings.yml"
    return f"`{path.relative_to(ROOT)}`, as shipped:\n\n```yaml\n{path.read_text().rstrip()}\n```"


def import_layers() -> str:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    lines = []
    for contract in config["contracts"]:
        lines += [f"Contract **{contract['name']}** ({contract['type']}), top to bottom:", ""]
        for i, layer in enumerate(contract.get("layers", []), 1):
            rooms = " | ".join(f"`{p.strip()}`" for p in layer.split("|"))
            lines.append(f"{i}. {rooms}")
        ignored = contract.get("ignore_imports", [])
        if ignored:
            lines += ["", "Imports allowed against the direction:", ""]
            lines += [f"- `{i}`" for i in ignored]
        lines.append("")
    return "\n".join(lines)


GENERATORS = {
    "request": request_reference,
    "cli": cli_reference,
    "errors": errors_reference,
    "json-schema": json_schema_reference,
    "settings": settings_reference,
    "settings-file": settings_file,
    "import-layers": import_layers,
}


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: unknown generated block {name!r} (known: {sorted(GENERATORS)})")
        return GENERATORS[name]()

    markdown = SOURCE_NOTE.sub("", markdown)
    if "<!-- source-note -->" in markdown or "<!-- /source-note -->" in markdown:
        raise ValueError(f"{page.file.src_path}: a source note needs both lines, <!-- source-note --> then "
                         "<!-- /source-note -->, each on a line of its own")
    return MARKER.sub(replace, markdown)
