"""What looks like a secret, by a file's name or by its content.

By name: a short list of files that hold credentials by their nature (SECRET_NAMES below).
By content: Yelp's detect-secrets with its default plugins and filters (an inline
`pragma: allowlist secret` comment is honoured), in this process, on text up to the caller's
bound. The finding says which kind of secret and on which line, never its value.

detect-secrets costs milliseconds a file (every plugin on every line, in Python): a tree of
100k new files would take minutes. So each file is first matched against what could make any
plugin fire (`_Triggers`, built from the plugins themselves: a regex plugin's own patterns, a
keyword, a run of an entropy plugin's characters long enough to pass its limit), and only a
file that matches is scanned. The triggers are a superset of what the plugins find: a file
that matches none holds nothing detect-secrets would report; a plugin they do not know makes
every file scanned.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import fnmatch
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

from detect_secrets.core.scan import scan_file
from detect_secrets.settings import default_settings

__all__ = ["Finding", "secret_name", "has_credentials", "scanner", "Scan", "SECRET_NAMES", "TEMPLATES"]

# Files that hold credentials by their nature, matched on the file's own name (any folder).
SECRET_NAMES = (
    (".env", "an environment file"),
    (".env.*", "an environment file"),
    ("*.pem", "a PEM key or certificate bundle"),
    ("*.key", "a private key"),
    ("*.p12", "a PKCS#12 key store"),
    ("*.pfx", "a PKCS#12 key store"),
    ("*.jks", "a Java key store"),
    ("id_rsa", "an SSH private key"),
    ("id_dsa", "an SSH private key"),
    ("id_ecdsa", "an SSH private key"),
    ("id_ed25519", "an SSH private key"),
    (".netrc", "a login file"),
    ("_netrc", "a login file"),
    (".git-credentials", "git's stored credentials"),
    (".htpasswd", "a password file"),
    ("credentials.json", "a credentials file"),
    ("client_secret*.json", "an OAuth client secret"),
)
# Examples meant to be committed: the variables without their values.
TEMPLATES = frozenset({".env.example", ".env.sample", ".env.template", ".env.dist", ".env.defaults"})
# Files that are a secret only when they carry credentials (a registry's address alone is not).
CREDENTIAL_FILES = {".npmrc": re.compile(rb"_auth(?:Token)?\s*=|_password\s*=", re.I),
                    ".pypirc": re.compile(rb"^\s*password\s*[=:]", re.I | re.M)}


@dataclass(frozen=True)
class Finding:
    kind: str        # detect-secrets' name for it ("AWS Access Key", "Secret Keyword", ...)
    line: int
    digest: str      # its hash (detect-secrets' secret_hash): tells a secret already there from a new one


# One match for every name first: most files are none of them (a tree of 100k files is asked about each).
_ANY_SECRET_NAME = re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern, _ in SECRET_NAMES))


def secret_name(path: str) -> str | None:
    """Why a file of this name is a secret, or None."""
    name = path.rstrip("/").rpartition("/")[2]
    if name in TEMPLATES or not _ANY_SECRET_NAME.match(name):
        return None
    for pattern, what in SECRET_NAMES:
        if fnmatch.fnmatchcase(name, pattern):
            return f"{what} ({pattern})"
    return None


def has_credentials(path: str, data: bytes) -> str | None:
    """Why a registry's settings file (.npmrc, .pypirc) with these contents is a secret, or None."""
    name = PurePosixPath(path).name
    pattern = CREDENTIAL_FILES.get(name)
    if pattern is not None and pattern.search(data):
        return f"{name} with credentials in it"
    return None


Scan = Callable[[str, bytes], "tuple[Finding, ...]"]


class _Scanner:
    """scan(path, data), and whether a file needs detect-secrets at all (`needs`)."""

    def __init__(self, scan: Scan, triggers: "_Triggers | None"):
        self._scan, self._triggers = scan, triggers

    def __call__(self, path: str, data: bytes) -> "tuple[Finding, ...]":
        return self._scan(path, data) if self.needs(path, data) else ()

    def needs(self, path: str, data: bytes) -> bool:
        """False when no plugin could fire on data (the prefilter): nothing to scan, at no cost."""
        return self._triggers is None or self._triggers.could_fire(path, data)

    def needing(self, files: list[tuple[str, bytes | None]]) -> list[bool]:
        """needs() of each file, the triggers run once over the whole batch (a search per pattern
        per file costs more than the search itself): a file no match touches is cleared; one a
        match touches, or that is not UTF-8 (None: unknown), is asked alone."""
        if self._triggers is None:
            return [True] * len(files)
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
        for pattern, literal, folded in self._triggers.screened():
            if literal and lower is not None and literal not in (lower if folded else whole):
                continue  # a literal every match holds is not in the text: no match
            if folded and lower is not None and _all_lower(pattern):
                pattern, searched = self._triggers.exact(pattern), lower
            else:
                searched = whole
            for found in pattern.finditer(searched):
                first = bisect.bisect_right(starts, found.start()) - 1
                last = bisect.bisect_right(starts, max(found.start(), found.end() - 1)) - 1
                touched.update(range(first, last + 1))
        return [n in touched and (n in odd or self.needs(path, data)) for n, (path, data) in enumerate(files)]


# A line configparser reads as a section header: detect-secrets then scans the file as a
# config file too, its values unquoted (transformers/config.py).
_SECTION = re.compile(r"^[ \t]*\[.*\]", re.M)


@dataclass(frozen=True)
class _Triggers:
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
        from detect_secrets.util.filetype import determine_file_type

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
    from re import _constants as sre  # type: ignore[attr-defined]
    from re import _parser as parse  # type: ignore[attr-defined]

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


def _triggers() -> _Triggers | None:
    """From the plugins the settings activate; None when one is of a kind not known here."""
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
    from detect_secrets.plugins.keyword import DENYLIST, KeywordDetector
    from detect_secrets.settings import get_plugins
    from detect_secrets.util.filetype import FileType

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
    return _Triggers(tuple(patterns), tuple(quoted), tuple(bare), plain)


@contextlib.contextmanager
def scanner() -> Iterator[_Scanner]:
    """scan(path, data): what detect-secrets finds in data, a file of that name. Each is
    written to a private folder of its own first (0700, removed at the end): the scanner reads
    files by name, and the file's name chooses its parser (YAML, INI...)."""
    with default_settings(), tempfile.TemporaryDirectory(prefix="genesis-scan-") as folder:
        def scan(path: str, data: bytes) -> tuple[Finding, ...]:
            target = Path(folder) / (PurePosixPath(path).name or "file")
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            try:
                return tuple(Finding(s.type, s.line_number, s.secret_hash) for s in scan_file(str(target)))
            finally:
                target.unlink()
        yield _Scanner(scan, _triggers())
