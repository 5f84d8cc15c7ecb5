"""YAML loading for requests and settings: PyYAML's safe loader, with aliases bounded.

An alias reuses a node without copying it, so a 1 KB file of nested aliases ("billion laughs") describes a value
of billions of nodes; PyYAML builds it as shared references, but whatever walks it (validation, an error message
echoing it) expands it. :class:`BoundedLoader` measures the value each document expands to (nodes, and the
characters of its scalars) before anything is constructed, and refuses it beyond :data:`MAX_NODES` or
:data:`MAX_CHARS`, or when an alias refers to itself.
"""

from __future__ import annotations

import yaml

#: Nodes a document may expand to (a request or settings file has a few hundred).
MAX_NODES = 20_000
#: Characters of scalars a document may expand to: 1 MiB, so a loaded value stays a few MiB.
MAX_CHARS = 1 << 20


class YAMLTooLarge(yaml.YAMLError):
    """The document expands (through aliases) beyond the limits, or holds a recursive alias."""


def expanded_size(root: yaml.Node) -> tuple[int, int]:
    """``(nodes, scalar characters)`` of ``root`` with every alias expanded, counted without expanding (each
    distinct node once).

    Raises
    ------
    YAMLTooLarge
        When a node contains itself (a recursive alias), which expands without end.
    """
    sizes: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            nodes, chars = 1, 0
            for child in _children(node):
                n, c = sizes[id(child)]
                nodes, chars = nodes + n, chars + c
            sizes[key] = (nodes, chars)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise YAMLTooLarge("a YAML alias refers to a node that contains it (a recursive alias)")
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = (1, len(node.value))
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise YAMLTooLarge("a YAML alias refers to a node that contains it (a recursive alias)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node):
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return ()


def _timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode):
    """PyYAML's date and timestamp constructor, with a value no calendar holds (``2024-02-30``, month 13, year
    0) or no timestamp at all (``!!timestamp x``) as a YAML error at its line rather than a bare ``ValueError``
    or ``AttributeError``."""
    try:
        return yaml.SafeLoader.construct_yaml_timestamp(loader, node)
    except Exception as exc:  # ValueError, OverflowError; AttributeError for `!!timestamp x`
        raise yaml.constructor.ConstructorError(
            None, None, f"'{node.value}' at line {node.start_mark.line + 1} is not a date or time ({exc})",
            node.start_mark) from None


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a document expanding beyond :data:`MAX_NODES` nodes or :data:`MAX_CHARS`
    characters (see the module docstring)."""

    def compose_document(self):
        node = super().compose_document()
        if node is not None:
            nodes, chars = expanded_size(node)
            if nodes > MAX_NODES or chars > MAX_CHARS:
                raise YAMLTooLarge(f"the document expands through aliases to more than {MAX_NODES:,} nodes or "
                                   f"{MAX_CHARS:,} characters ({nodes:,} nodes, {chars:,} characters); refused")
        return node


def load(text: str):
    """The one YAML document of ``text`` as Python values, like ``yaml.safe_load`` but bounded.

    Raises
    ------
    yaml.YAMLError
        When ``text`` is not YAML, or (:class:`YAMLTooLarge`) expands beyond the limits or nests collections
        deeper than PyYAML's recursive composer can go.
    """
    try:
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise YAMLTooLarge("collections nest too deeply") from None


BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)
