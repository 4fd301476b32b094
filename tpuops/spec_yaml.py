"""A spec's YAML, read with the guards plain YAML lacks: one value per key, and aliases that cannot explode.

PyYAML shares an aliased node rather than copying it, so parsing a ten-line "billion laughs" is quick, but
anything that walks the result (our duplicate-key check, pydantic) visits every shared copy: minutes. A spec
is a few dozen values; one whose aliases expand past `EXPANSION_BUDGET` nodes is refused before any walk.
"""

from __future__ import annotations

from typing import Any

import yaml

from tpuops.errors import SpecError

EXPANSION_BUDGET = 10_000  # nodes, once every alias is expanded; a large real spec has a few hundred


def compose(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """The YAML node tree (for line numbers) and the plain data, after the guards; SpecError names the line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(f"invalid YAML: {problem}", "check indentation and quoting", path=source, line=line) from None
    _refuse_alias_bombs(node, source)
    _refuse_duplicate_keys(node, source)
    if node is None:
        return None, None
    loader = yaml.SafeLoader("")
    try:
        return node, loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise SpecError(f"invalid YAML: {getattr(err, 'problem', None) or err}", "check indentation and quoting",
                        path=source, line=mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()


def _refuse_alias_bombs(root: yaml.Node | None, source: str) -> None:
    """Count the nodes the tree has once aliases are expanded (each shared node counted once, by memo)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise SpecError("a YAML alias refers to the value that contains it", "a spec cannot be recursive",
                            path=source, line=node.start_mark.line + 1)
        open_nodes.add(key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        total = 1 + sum(size(child) for child in children)
        open_nodes.discard(key)
        if total > EXPANSION_BUDGET:
            raise SpecError(f"YAML aliases expand to more than {EXPANSION_BUDGET:,} values",
                            "a spec needs no nested aliases: write the values out", path=source,
                            line=node.start_mark.line + 1)
        sizes[key] = total
        return total

    if root is not None:
        size(root)


def _refuse_duplicate_keys(node: yaml.Node | None, source: str) -> None:
    """YAML lets a second `zone:` silently win; a spec with two values for one key is refused instead."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(item, source)
    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[str, int] = {}
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value != "<<":
            line = key.start_mark.line + 1
            if key.value in first_line:
                raise SpecError(f"duplicate key '{key.value}' (first at {source}:{first_line[key.value]})",
                                "keep one of the two: YAML would silently use the last", path=source, line=line)
            first_line[key.value] = line
        _refuse_duplicate_keys(value, source)
