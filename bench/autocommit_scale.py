"""14. The auto-commit on a large tree: N new files (small source files, 100 to a folder)
committed by Genesis's auto-commit (its neutral git, the name and size checks, the content
scan for secrets) and, side by side on an identical tree, by plain `git add -A && git commit`.
Also how many files the auto-commit left out, and why (none should be, for time alone).

Usage: .venv/bin/python bench/autocommit_scale.py [N ...]   (default: 100000 300000)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import Row, git_project

PER_FOLDER = 100


def _tree(root: Path, n: int) -> Path:
    project = git_project(root)
    for i in range(n):
        folder = project / "src" / f"m{i // PER_FOLDER:05d}"
        if i % PER_FOLDER == 0:
            folder.mkdir(parents=True)
        (folder / f"f{i % PER_FOLDER:03d}.py").write_text(
            f'"""Module {i}."""\n\nNAME = "item-{i}"\n\n\ndef value_{i}(x):\n    return x * {i % 97} + len(NAME)\n')
    return project


def _plain(project: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "commit", "-qm", "plain", "--no-verify"], cwd=project, check=True)
    return time.perf_counter() - started


def _genesis(project: Path) -> tuple[float, Counter]:
    from genesis.repo.autocommit import commit

    started = time.perf_counter()
    result = commit(project, "genesis: bench", [], push=False, timeout=1800)
    took = time.perf_counter() - started
    if not result.committed:
        left = Counter(item.reason for item in result.left_out).most_common(3)
        raise SystemExit(f"the auto-commit did not commit: {result.error or 'nothing staged'}; left out: {left}")
    return took, Counter(item.reason for item in result.left_out)


SIZES = (100_000, 300_000)


def run(sizes: tuple[int, ...] = SIZES) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:   # both trees built first: measured back to back
            plain_tree, genesis_tree = _tree(Path(tmp) / "plain", n), _tree(Path(tmp) / "genesis", n)
            os.sync()   # neither is timed while the other tree's writes are still being flushed
            plain = _plain(plain_tree)
            os.sync()
            took, left = _genesis(genesis_tree)
        note = "; ".join(f"{count} left out: {why}" for why, count in left.most_common(3)) or "none left out"
        rows.append(Row(f"auto-commit: plain git add -A && git commit, {n} new files", "s", (plain,)))
        rows.append(Row(f"auto-commit: Genesis's auto-commit, {n} new files", "s", (took,), "<= 2x plain",
                        took <= 2 * plain and not left, baseline=rows[-1].name, note=note, ratio=took / plain))
    return rows


def main() -> int:
    sizes = tuple(int(a) for a in sys.argv[1:]) or SIZES
    for row in (row for n in sizes for row in run((n,))):   # each size said once measured: 300,000 files take a while
        ratio = f"  {row.ratio:.2f}x" if row.ratio is not None else ""
        verdict = "" if row.met is None else ("  met" if row.met else "  NOT met")
        print(f"{row.name}: {row.median:.2f} {row.unit}{ratio}{verdict}" + (f"  ({row.note})" if row.note else ""),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
