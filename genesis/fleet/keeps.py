"""Nothing dropped: a merge's result keeps every line either side added since their merge base.

A side's added lines are read from `git diff base side` (its tip: a line a later commit of the
same side changed or removed is that side's own choice, not asked for again). Each must still
be in the result, by git's own alignment: `git diff side result` does not remove it, or removes
it but adds the same text elsewhere (a moved line, a file the other side renamed). A line the
result removes and adds nowhere is lost, and named with its file, its lines in the side and
who added it. Blank lines are no content; TASKS.md is Genesis's own, merged by its own rule
(fleet/merging.py), so it is left out.

The diff reading (added, lost, hunks) is pure and replayed in tests; dropped() runs git.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from genesis.repo.gitcmd import GitFailed
from genesis.repo.tasks import TASKS_FILE

__all__ = ["Lost", "Line", "added", "removed", "lost", "hunks", "dropped", "said"]

Line = tuple[str, int, str]    # (path, its number in the side's file, from 1; its text)
DIFF = ("diff", "-U0", "--no-renames", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/",
        "--dst-prefix=b/")
SHOWN = 5     # hunks named in a result's words


@dataclass(frozen=True)
class Lost:
    """Lines a side added that the merge's result no longer holds."""
    path: str
    first: int          # lines first..last of the side's file
    last: int
    side: str           # who added them: the task, or the project branch (with the commit that did)
    text: str           # the first of them, cut

    def said(self) -> str:
        where = f"line {self.first}" if self.first == self.last else f"lines {self.first}-{self.last}"
        return f"{self.path} {where} (added by {self.side}: {self.text!r})"


def _path(header: str) -> str:
    """A file header's path (`+++ b/x`, `--- a/x`, or git's quoted form); "" for /dev/null."""
    name = header[4:].rstrip("\n")
    if name.startswith('"') and name.endswith('"'):
        name = name[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode(
            "latin-1", "replace").decode("utf-8", "replace")
    if name == "/dev/null":
        return ""
    return name[2:] if name[:2] in ("a/", "b/") else name


def _walk(diff: str) -> Iterable[tuple[str, str, int, str]]:
    """(sign, path, line, text) for every removed ('-', the old file's path and line) and added
    ('+', the new file's) line of a -U0 patch."""
    old = new = ""
    at_old = at_new = 0
    header = False
    for raw in diff.split("\n"):
        if raw.startswith("diff --git "):
            old, new, header = "", "", True
            continue
        if header and raw.startswith("--- "):
            old = _path(raw)
            continue
        if header and raw.startswith("+++ "):
            new = _path(raw)
            continue
        if raw.startswith("@@ "):
            header = False
            spans = raw.split(" ")
            at_old = int(spans[1][1:].split(",")[0])
            at_new = int(spans[2][1:].split(",")[0])
            continue
        if header:
            continue
        if raw.startswith("-") and old:
            yield "-", old, at_old, raw[1:]
            at_old += 1
        elif raw.startswith("+") and new:
            yield "+", new, at_new, raw[1:]
            at_new += 1


def added(diff: str, skip: Sequence[str] = (TASKS_FILE,)) -> list[Line]:
    """The non-blank lines a -U0 patch adds, with their place in its new files."""
    return [(p, n, t) for sign, p, n, t in _walk(diff) if sign == "+" and t.strip() and p not in skip]


def removed(diff: str) -> tuple[dict[tuple[str, int], str], Counter]:
    """What a -U0 patch removes, by (old path, line), and the texts it adds (anywhere), counted."""
    gone: dict[tuple[str, int], str] = {}
    back: Counter = Counter()
    for sign, path, n, text in _walk(diff):
        if sign == "-":
            gone[(path, n)] = text
        else:
            back[text.rstrip()] += 1
    return gone, back


def lost(side_added: Sequence[Line], side_to_result: str) -> list[Line]:
    """The side's added lines that the patch from the side to the result removes and adds nowhere."""
    gone, back = removed(side_to_result)
    out = []
    for path, n, text in side_added:
        if (path, n) not in gone:
            continue
        key = text.rstrip()
        if back[key] > 0:   # moved, or its file renamed: still there
            back[key] -= 1
            continue
        out.append((path, n, text))
    return out


def hunks(lines: Sequence[Line], side: Callable[[str, int], str] | str) -> list[Lost]:
    """Lost lines, run together where they follow each other in one file; side names who added
    a run (a name, or a function of its path and first line)."""
    found: list[Lost] = []
    for path, n, text in sorted(lines, key=lambda x: (x[0], x[1])):
        last = found[-1] if found else None
        if last is not None and last.path == path and last.last + 1 == n:
            found[-1] = Lost(path, last.first, n, last.side, last.text)
            continue
        who = side(path, n) if callable(side) else side
        found.append(Lost(path, n, n, who, " ".join(text.split())[:80]))
    return found


def dropped(git, base: str, sides: Sequence[tuple[str, str]], result: str,
            blame: Callable[[str, str, int], str] | None = None) -> list[Lost]:
    """The hunks either side added since base that result lost. sides: (who, tip) each; blame
    (tip, path, line) -> who, for a side whose lines may be several authors' (the project branch).
    git: a fleet Git (worktrees.Git) in the repository. GitFailed when git cannot tell."""
    found: list[Lost] = []
    for who, tip in sides:
        if tip == base:
            continue
        mine = added(_diff(git, base, tip))
        if not mine:
            continue
        gone = lost(mine, _diff(git, tip, result))
        if gone:
            name: Callable[[str, int], str] | str = (lambda p, n, t=tip, w=who: blame(t, p, n) or w) if blame else who
            found += hunks(gone, name)
    return found


def _diff(git, a: str, b: str) -> str:
    done = git(*DIFF, a, b)
    if done.returncode != 0:
        raise GitFailed(f"`git diff {a[:10]} {b[:10]}` failed in {git.cwd}: {(done.stderr or done.text)[-300:]}")
    return done.stdout.decode("utf-8", "replace")


def said(found: Sequence[Lost], most: int = SHOWN) -> str:
    """The lost hunks in words, the first few named."""
    shown = "; ".join(h.said() for h in found[:most])
    return shown + (f"; and {len(found) - most} more" if len(found) > most else "")
