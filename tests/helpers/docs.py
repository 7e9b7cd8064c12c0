"""The manual as a test reads it: README.md and docs/**/*.md, their relative links, the anchors
GitHub makes of their headings, and their fenced code blocks."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from helpers import paths

README = paths.ROOT / "README.md"
DOCS = paths.ROOT / "docs"
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)
# [text](target "title") and ![alt](target); the text may wrap lines and hold one level of [].
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.M)
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]+)\"", re.I)
HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:id|name)=\"([^\"]+)\"", re.I)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:|^//", re.I)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int                 # the line of its first content line, 1-based
    lang: str                 # the fence's info word, lower case ("" for none)
    lines: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{name(self.page)}:{self.line}"


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str               # as written

    @property
    def where(self) -> str:
        return f"{name(self.page)}:{self.line}"

    @property
    def path(self) -> Path:
        """The file or folder it points at (the page itself for a bare #anchor)."""
        part = urllib.parse.unquote(self.target.split("#", 1)[0].split("?", 1)[0])
        if not part:
            return self.page
        return (paths.ROOT / part.lstrip("/")) if part.startswith("/") else (self.page.parent / part)

    @property
    def anchor(self) -> str:
        return urllib.parse.unquote(self.target.split("#", 1)[1]) if "#" in self.target else ""


def name(page: Path) -> str:
    return page.relative_to(paths.ROOT).as_posix()


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        fence = opened.group(1)
        close = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
        found.append(Block(page, i + 2, opened.group(2).lower(), tuple(lines[i + 1:end])))
        i = end + 1
    return found


def prose(page: Path) -> str:
    """The page's text with its code blocks and code spans blanked out (newlines kept, so that
    an offset still gives its line)."""
    lines = page.read_text().splitlines()
    for block in blocks(page):
        for n in range(block.line - 2, min(block.line + len(block.lines), len(lines))):
            lines[n] = ""
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), "\n".join(lines))


def links(page: Path) -> list[Link]:
    """Every relative link of the page (markdown, reference-style, HTML), outside code."""
    text = prose(page)
    found = []
    for pattern in (INLINE_LINK, REFERENCE_LINK, HTML_LINK):
        for match in pattern.finditer(text):
            target = match.group(1)
            if not EXTERNAL.match(target):
                found.append(Link(page, text.count("\n", 0, match.start()) + 1, target))
    return sorted(found, key=lambda link: link.line)


def slug(heading: str) -> str:
    """The anchor GitHub makes of a heading's text: its rendered words in lower case,
    punctuation dropped, each space a '-'."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)   # a link: its text
    text = re.sub(r"<[^>]+>", "", text)                                           # HTML tags
    text = text.replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every #anchor the page has: its headings' (a repeated one gets -1, -2...) and its
    HTML anchors' (<a id=...>, <a name=...>)."""
    text = prose(page)
    raw = page.read_text()
    found: set[str] = set()
    seen: dict[str, int] = {}
    for n, line in enumerate(text.splitlines()):
        match = HEADING.match(line)
        if not match:
            continue
        # Code spans were blanked in `text`: take the heading's words from the page itself.
        words = HEADING.match(raw.splitlines()[n]).group(2)
        base = slug(words)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found |= {anchor.lower() for anchor in HTML_ANCHOR.findall(text)}
    return found


def linked_from(target: Path) -> list[str]:
    """The pages of the manual with a link to the file."""
    target = target.resolve()
    return [name(page) for page in pages() if any(link.path.resolve() == target for link in links(page))]
