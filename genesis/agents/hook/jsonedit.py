"""A format-preserving JSON editor, so that a settings file the user wrote keeps its key order, indentation,
non-ASCII text and line endings: only the values that change are rewritten."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["same", "new_text"]

WS = " \t\r\n"


@dataclass(frozen=True)
class _Node:
    """A JSON value's place in the text; members are (key text span, key, value) for objects."""
    start: int
    end: int
    kind: str                                   # "object", "array" or "scalar"
    members: tuple = ()                         # ((key_start, key_end, key, _Node), ...)
    items: tuple = ()                           # (_Node, ...)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in WS:
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    i += 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _node(text: str, i: int) -> _Node:
    """Spans of an already validated JSON text, from the value starting at i."""
    ch = text[i]
    if ch in "{[":
        close, members, items = "}" if ch == "{" else "]", [], []
        j = _skip_ws(text, i + 1)
        while text[j] != close:
            if ch == "{":
                key_end = _string_end(text, j)
                colon = _skip_ws(text, key_end)
                value = _node(text, _skip_ws(text, colon + 1))
                members.append((j, key_end, json.loads(text[j:key_end]), value))
            else:
                value = _node(text, j)
                items.append(value)
            j = _skip_ws(text, value.end)
            if text[j] == ",":
                j = _skip_ws(text, j + 1)
        return _Node(i, j + 1, "object" if ch == "{" else "array", tuple(members), tuple(items))
    if ch == '"':
        return _Node(i, _string_end(text, i), "scalar")
    j = i
    while j < len(text) and text[j] not in WS + ",]}":
        j += 1
    return _Node(i, j, "scalar")


def same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, and an object's key order does not matter."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


class _Editor:
    """Renders a new document into the old one's text, copying every unchanged value verbatim."""

    def __init__(self, text: str):
        self.text = text
        self.nl = "\r\n" if "\r\n" in text else "\n"
        self.unit = self._indent_unit()
        self.start = _skip_ws(text, 0)
        self.root = _node(text, self.start)
        first = [text[m[1]:m[3].start] for m in self.root.members[:1]]
        self.colon = first[0] if first and "\n" not in first[0] else ": "  # as the file writes "key": value
        self.space = " "  # after a comma on one line: "a, b" or "a,b"
        if len(self.root.members) > 1:
            between = text[self.root.members[0][3].end:self.root.members[1][0]]
            after = between[between.index(",") + 1:]
            self.space = after if "\n" not in after else " "

    def _indent_unit(self) -> str | None:
        """The file's indentation step ("  ", "    ", a tab), None for a one-line file."""
        widths = []
        for line in self.text.split("\n")[1:]:  # not splitlines(): a string may hold a raw U+2028
            line = line.rstrip("\r")
            stripped = line.lstrip(" \t")
            if stripped and len(stripped) < len(line):
                widths.append(line[:len(line) - len(stripped)])
        if not widths:
            return None if self.text.strip().count("\n") == 0 else ""
        return min(widths, key=len)

    def _line_indent(self, pos: int) -> str:
        start = self.text.rfind("\n", 0, pos) + 1
        line = self.text[start:pos]
        return line[:len(line) - len(line.lstrip(" \t"))]

    def dump(self, value: Any, prefix: str, multiline: bool) -> str:
        if not multiline or self.unit is None:
            return json.dumps(value, ensure_ascii=False, separators=("," + self.space, self.colon))
        out = json.dumps(value, ensure_ascii=False, indent=self.unit, separators=(",", self.colon))
        return out.replace("\n", self.nl + prefix)

    def render(self, node: _Node, old: Any, new: Any) -> str:
        if same(old, new):
            return self.text[node.start:node.end]
        if isinstance(old, dict) and isinstance(new, dict) and node.kind == "object":
            return self._container(node, new, "{}")
        if isinstance(old, list) and isinstance(new, list) and node.kind == "array":
            return self._container(node, new, "[]")
        return self.dump(new, self._line_indent(node.start), True)

    def _layout(self, node: _Node, parts: tuple) -> tuple[str, str, str]:
        """Whitespace after the opening bracket, around each comma, before the closing one."""
        text = self.text
        if not parts:
            if self.unit is None:
                return "", "," + self.space, ""
            inner = self.nl + self._line_indent(node.start)
            return inner + self.unit, "," + inner + self.unit, inner
        ends = [p[3].end if node.kind == "object" else p.end for p in parts]
        starts = [p[0] if node.kind == "object" else p.start for p in parts]
        lead, trail = text[node.start + 1:starts[0]], text[ends[-1]:node.end - 1]
        if len(parts) > 1:
            comma = text[ends[0]:starts[1]]
        else:
            comma = "," + (lead if "\n" in lead else self.space)
        return lead, comma, trail

    def _container(self, node: _Node, new: Any, brackets: str) -> str:
        parts = node.members if node.kind == "object" else node.items
        lead, comma, trail = self._layout(node, parts)
        multiline = "\n" in comma
        prefix = comma[comma.rfind("\n") + 1:] if multiline else ""
        if node.kind == "object":
            old = {m[2]: m for m in node.members}  # the last of duplicate keys, as json.loads reads it
            rendered = []
            for key, value in new.items():
                if key in old:
                    key_start, _, _, child = old[key]
                    rendered.append(self.text[key_start:child.start]
                                    + self.render(child, json.loads(self.text[child.start:child.end]), value))
                else:
                    rendered.append(json.dumps(key, ensure_ascii=False) + self.colon
                                    + self.dump(value, prefix, multiline))
        else:
            rendered = self._items(node.items, new, prefix, multiline)
        if not rendered:
            return brackets
        return brackets[0] + lead + comma.join(rendered) + trail + brackets[1]

    def _items(self, olds: tuple, new: list, prefix: str, multiline: bool) -> list[str]:
        """Reuse each old item that survives (in order); an edited item is rendered against the old one in
        its place, so a changed hook group keeps its layout."""
        values = [json.loads(self.text[n.start:n.end]) for n in olds]
        out, p = [], 0
        for item in new:
            j = next((k for k in range(p, len(olds)) if same(values[k], item)), None)
            if j is not None:
                out.append(self.text[olds[j].start:olds[j].end])
                p = j + 1
            elif p < len(olds) and type(values[p]) is type(item) and isinstance(item, (dict, list)) \
                    and not any(same(values[p], later) for later in new):
                out.append(self.render(olds[p], values[p], item))
                p += 1
            else:
                out.append(self.dump(item, prefix, multiline))
        return out

    def edit(self, old: dict, new: dict) -> str:
        if not self.root.members and not self.unit:
            self.unit = "  "  # "{}" has no style to keep: write it the readable way
        return self.text[:self.start] + self.render(self.root, old, new) + self.text[self.root.end:]


def new_text(old_text: str | None, old: dict, new: dict) -> str:
    """`old_text` (which parses to `old`) rewritten to hold `new`; a new file is written indented by two."""
    if old_text is None:
        return json.dumps(new, ensure_ascii=False, indent=2) + "\n"
    return _Editor(old_text).edit(old, new)
