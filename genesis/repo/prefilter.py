"""The secret scan's prefilter: whether any of detect-secrets' active plugins could fire on a
file, asked of a whole batch of files at once.

detect-secrets costs milliseconds a file (every plugin on every line, in Python). The triggers
here are built from the plugins themselves (a regex plugin's own patterns, the keyword list, a
run of an entropy plugin's characters long enough to pass its limit) and are a superset of what
they find: a file no trigger matches holds nothing detect-secrets would report. Each pattern is
first screened by a literal every match of it must hold, read from Python's own parse of it,
and searched in lowercased text where it ignores case (ASCII only). A plugin of a kind not known
here makes every file scanned.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

try:  # Python's own regex parser: re._parser from 3.11, sre_parse before
    from re import _constants as sre  # type: ignore[attr-defined]
    from re import _parser as parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre  # type: ignore[no-redef]
    import sre_parse as parse  # type: ignore[no-redef]

from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
from detect_secrets.plugins.keyword import DENYLIST, KeywordDetector
from detect_secrets.settings import get_plugins
from detect_secrets.util.filetype import FileType, determine_file_type

__all__ = ["Triggers", "triggers", "needing"]


# A line configparser reads as a section header: detect-secrets then scans the file as a
# config file too, its values unquoted (transformers/config.py).
_SECTION = re.compile(r"^[ \t]*\[.*\]", re.M)


@dataclass(frozen=True)
class Triggers:
    """What could make one of the active plugins fire (see the module's docstring)."""
    patterns: tuple[re.Pattern, ...]       # regex plugins' own patterns, the keywords
    quoted: tuple[re.Pattern, ...]         # entropy plugins: a long enough quoted run of their characters
    bare: tuple[re.Pattern, ...]           # the same unquoted (files detect-secrets reads as YAML or config)
    plain_types: frozenset                 # file types read line by line only (never transformed)

    def all(self) -> tuple[re.Pattern, ...]:
        """Every pattern: a text none of them matches could make no plugin fire, whatever its type."""
        return self.patterns + self.quoted + self.bare

    def screened(self) -> list[tuple[re.Pattern, str, bool]]:
        """Each pattern with a literal every match of it holds ("" if none is known) and whether
        it is matched ignoring case (the literal then lowercase, to look for in lowercased text)."""
        return [(p, *_literal(p)) for p in self.all()]

    @staticmethod
    def exact(pattern: re.Pattern) -> re.Pattern:
        """pattern without ignoring case, for ASCII text lowercased already (faster to search)."""
        return _exact(pattern.pattern, pattern.flags & ~re.IGNORECASE)

    def could_fire(self, path: str, data: bytes) -> bool:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return True  # as detect-secrets reads it (or skips it): its call
        if any(p.search(text) for p in self.patterns):
            return True
        plain = determine_file_type(PurePosixPath(path).name or "file") in self.plain_types
        runs = self.quoted if plain and not _SECTION.search(text) else self.bare
        return any(p.search(text) for p in runs)


@functools.lru_cache(maxsize=256)
def _exact(text: str, flags: int) -> re.Pattern:
    return re.compile(text, flags)


def _all_lower(pattern: re.Pattern) -> bool:
    """Whether the pattern names no uppercase letter (its own text, a class escape like \\W aside;
    none written as a code): matched case-sensitively in lowercased text, it finds what it finds
    ignoring case in the text (ASCII only)."""
    text = pattern.pattern
    if re.search(r"\\[xuUN0-7]", text):
        return False
    bare = re.sub(r"\\[A-Za-z]", "", text)
    return bare == bare.lower()


def _literal(pattern: re.Pattern) -> tuple[str, bool]:
    """The longest run of literal characters every match of pattern holds, lowercased when the
    pattern ignores case, and whether it does; ("", ...) when none is found. Read from Python's
    own parse of the pattern: only what is mandatory in sequence (never inside a branch, an
    optional part or a lookaround; a group that turns on ignoring case is not looked into)."""
    folded = bool(pattern.flags & re.IGNORECASE)

    def longest(items) -> str:
        best, run = "", []
        for op, av in list(items) + [(None, None)]:
            if op is sre.LITERAL:
                run.append(chr(av))
                continue
            best = max(best, "".join(run), key=len)
            run = []
            inner = ""
            if op is sre.SUBPATTERN and not (av[1] & re.IGNORECASE and not folded):
                inner = longest(av[3])
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and av[0] >= 1:
                inner = longest(av[2])
            elif op is sre.BRANCH:  # one alternative's literal that every other one holds too
                each = [longest(alternative) for alternative in av[1]]
                shortest = min(each, key=len)
                inner = shortest if shortest and all(shortest in other for other in each) else ""
            best = max(best, inner, key=len)
        return best

    try:
        found = longest(parse.parse(pattern.pattern, pattern.flags))
    except Exception:  # noqa: BLE001 - a pattern this cannot read is searched whole, as before
        return "", folded
    return (found.lower() if folded else found), folded


def triggers() -> Triggers | None:
    """From the plugins the settings activate; None when one is of a kind not known here."""
    patterns, quoted, bare = [], [], []
    for plugin in get_plugins():
        if isinstance(plugin, RegexBasedDetector):
            patterns += [re.compile(r.pattern, r.flags | re.M) if isinstance(r, re.Pattern) else
                         re.compile(str(r), re.M) for r in plugin.denylist]
        elif isinstance(plugin, HighEntropyStringsPlugin):
            # Shannon entropy of n characters is at most log2(n): above the limit needs n > 2**limit.
            least = int(2 ** plugin.entropy_limit) + 1
            chars = f"[{re.escape(plugin.charset)}]{{{least},}}"
            quoted.append(re.compile(f"(['\"]){chars}\\1"))
            bare.append(re.compile(chars))
        elif isinstance(plugin, KeywordDetector):
            patterns.append(re.compile("|".join(DENYLIST), re.I))
        else:
            return None
    plain = frozenset(t for t in FileType if t not in (FileType.OTHER, FileType.YAML))
    return Triggers(tuple(patterns), tuple(quoted), tuple(bare), plain)


def needing(found: Triggers, files: list[tuple[str, bytes | None]]) -> list[bool]:
    """needs() of each file, the triggers run once over the whole batch (a search per pattern
    per file costs more than the search itself): a file no match touches is cleared; one a
    match touches, or that is not UTF-8 (None: unknown), is asked alone."""
    texts, starts, at, odd = [], [], 0, set()
    for n, (_, data) in enumerate(files):
        try:
            text = data.decode("utf-8") if data is not None else ""
        except UnicodeDecodeError:
            odd.add(n)
            text = ""
        if data is None:
            odd.add(n)
        starts.append(at)
        texts.append(text)
        at += len(text) + 1
    whole = "\n".join(texts)
    lower = whole.lower() if whole.isascii() else None  # same length: positions map as they are
    touched = set(odd)
    for pattern, literal, folded in found.screened():
        if literal and (lower is not None or not folded) and literal not in (lower if folded else whole):
            continue  # a literal every match holds is not in the text: no match
        if folded and lower is not None and _all_lower(pattern):
            pattern, searched = found.exact(pattern), lower
        else:
            searched = whole
        for match in pattern.finditer(searched):
            first = bisect.bisect_right(starts, match.start()) - 1
            last = bisect.bisect_right(starts, max(match.start(), match.end() - 1)) - 1
            touched.update(range(first, last + 1))
    return [n in touched and (n in odd or found.could_fire(path, data)) for n, (path, data) in enumerate(files)]
