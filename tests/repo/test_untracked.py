"""The user's untracked and ignored files copied aside and put back: paths and modes kept, a
symlink copied as a link (never followed), a FIFO never waited on, the caps and the time
bound listed as not copied, rebuildable folders and Genesis's own files left out, nothing
overwritten or written through a symlinked folder on the way back."""

from __future__ import annotations

import itertools
import os
import stat

from helpers.git import commit_file

from genesis.repo import untracked


def test_the_copy_keeps_paths_modes_and_links_and_lists_what_it_left(project, tmp_path):
    (project / "sub").mkdir()
    (project / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (project / "sub" / "run.sh").chmod(0o751)
    os.symlink("/etc/passwd", project / "outside")          # copied as a link, its target never read
    os.mkfifo(project / "pipe")                               # never opened for reading: it would block
    (project / "big.bin").write_bytes(b"x" * 3000)
    (project / "fits.txt").write_text("y" * 1000)
    copy = untracked.copy_aside(project, ["sub/run.sh", "outside", "pipe", "big.bin", "fits.txt", "../escape"],
                                tmp_path / "copy", 2500, file_most=2000)
    assert copy.copied == ("sub/run.sh", "outside", "fits.txt")
    why = dict(copy.skipped)
    assert set(why) == {"pipe", "big.bin", "../escape"}
    assert "per-file cap" in why["big.bin"] and "GENESIS_UNTRACKED_COPY_MAX_MB" in why["big.bin"]
    files = tmp_path / "copy" / "files"
    assert stat.S_IMODE(os.stat(files / "sub" / "run.sh").st_mode) == 0o751
    assert os.readlink(files / "outside") == "/etc/passwd"
    assert untracked.manifest_of(tmp_path / "copy")["skipped"][0]["path"] in why


def test_the_total_cap_and_the_time_bound(project, tmp_path):
    for name in ("a", "b", "c"):
        (project / name).write_text("z" * 600)
    capped = untracked.copy_aside(project, ["a", "b", "c"], tmp_path / "capped", 1000)
    assert capped.copied == ("a",) and [p for p, _ in capped.skipped] == ["b", "c"]
    ticks = itertools.count(0, 40)  # each look at the clock is 40 s later
    late = untracked.copy_aside(project, ["a", "b", "c"], tmp_path / "late", 10_000, bound=60,
                                clock=lambda: next(ticks))
    assert late.copied == ("a",) and all("ran out" in why for _, why in late.skipped)


def test_ignored_files_without_rebuildable_folders_or_genesis_own(project):
    commit_file(project, ".gitignore", "*.local\nsecrets/\nnode_modules/\norchestrator/logs/\n", "ignore")
    (project / "a.local").write_text("a\n")
    (project / "secrets").mkdir()
    (project / "secrets" / "key.pem").write_text("k\n")
    (project / "secrets" / "node_modules").mkdir()
    (project / "secrets" / "node_modules" / "dep.js").write_text("d\n")
    (project / "node_modules" / "x").mkdir(parents=True)
    (project / "node_modules" / "x" / "index.js").write_text("x\n")
    (project / "orchestrator" / "logs").mkdir(parents=True)
    (project / "orchestrator" / "logs" / "console.log").write_text("log\n")
    found = untracked.ignored_files(project, ["/orchestrator/logs/"])
    assert sorted(found) == ["a.local", "secrets/key.pem"]


def test_restore_puts_back_what_is_missing_and_never_overwrites(project, tmp_path):
    (project / "d").mkdir()
    (project / "d" / "notes.txt").write_text("notes\n")
    (project / "keep.txt").write_text("old\n")
    os.symlink("keep.txt", project / "link")
    folder = tmp_path / "copy"
    untracked.copy_aside(project, ["d/notes.txt", "keep.txt", "link"], folder, 1 << 20)
    for rel in ("d/notes.txt", "keep.txt", "link"):
        os.unlink(project / rel)
    os.rmdir(project / "d")
    (project / "keep.txt").write_text("new\n")
    done = untracked.restore(project, folder)
    assert set(done.restored) == {"d/notes.txt", "link"} and done.present == ("keep.txt",)
    assert (project / "keep.txt").read_text() == "new\n" and (project / "d" / "notes.txt").read_text() == "notes\n"
    assert os.readlink(project / "link") == "keep.txt"


def test_restore_never_writes_through_a_symlinked_folder(project, tmp_path):
    (project / "d").mkdir()
    (project / "d" / "f.txt").write_text("f\n")
    folder = tmp_path / "copy"
    untracked.copy_aside(project, ["d/f.txt"], folder, 1 << 20)
    (project / "d" / "f.txt").unlink()
    (project / "d").rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, project / "d")
    done = untracked.restore(project, folder)
    assert done.restored == () and done.failed and not (elsewhere / "f.txt").exists()


def test_older_copies_are_pruned_never_the_current_one(tmp_path):
    root = tmp_path / "copies"
    for run in ("r1", "r2", "r3", "r4"):
        (root / run).mkdir(parents=True)
    assert untracked.prune(root, "r1", keep=2) == ["r2", "r3"]
    assert untracked.copies(root) == ["r1", "r4"]
