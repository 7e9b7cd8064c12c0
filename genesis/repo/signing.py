"""Whether Genesis's own commits can be signed as the repository asks, unattended.

With `commit.gpgsign` on, every `git commit` runs `gpg.program` (or ssh-keygen for
`gpg.format=ssh`), which may wait all night on a pinentry nobody answers: each auto-commit
would then run into its time bound. So the start tries one signature, bounded: if it
works, Genesis's commits are signed as configured; if not, they are made unsigned with a
`Genesis-Unsigned:` trailer saying why, and the start says so. The answer is kept for
the run in Genesis's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from genesis.repo.gitcmd import GitFailed, GitTimeout, run_git
from genesis.store.atomicio import CorruptFile, read_json, write_json

__all__ = ["Signing", "probe", "save", "load", "unsigned_for", "signing_file", "PROBE_TIMEOUT"]

SIGNING_FILE = "signing.json"
PROBE_TIMEOUT = 5.0   # seconds one test signature may take: a key agent answers in well under one


@dataclass(frozen=True)
class Signing:
    configured: bool     # commit.gpgsign is on
    unsigned: str = ""   # why Genesis's commits are made unsigned ("": signed as configured, or not asked)


def _config(project: Path, key: str) -> str:
    try:
        done = run_git(project, ["config", "--get", key], timeout=PROBE_TIMEOUT)
    except GitFailed:
        return ""
    return done.text.strip() if done.returncode == 0 else ""


def _on(project: Path) -> bool:
    return _config(project, "commit.gpgsign").lower() in ("true", "yes", "on", "1")


def signing_file(state_dir: Path) -> Path:
    return Path(state_dir) / SIGNING_FILE


def probe(project: Path, timeout: float = PROBE_TIMEOUT) -> Signing:
    """Try one signature of HEAD's tree (no commit is made), as Genesis's commits would sign."""
    if not _on(project):
        return Signing(False)
    fmt = _config(project, "gpg.format") or "openpgp"
    program = _config(project, f"gpg.{fmt}.program") or _config(project, "gpg.program") or \
        ("ssh-keygen" if fmt == "ssh" else "gpg")
    tree = run_git(project, ["rev-parse", "--verify", "-q", "HEAD^{tree}"], timeout=timeout)
    base = tree.text.strip() if tree.returncode == 0 else "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # empty tree
    identity = [("user.name", "Genesis"), ("user.email", "genesis@localhost")] \
        if not _config(project, "user.email") else []
    try:
        tried = run_git(project, ["commit-tree", "-S", base, "-m", "genesis signing probe"], timeout=timeout,
                        config=identity, env={"GPG_TTY": "", "PINENTRY_USER_DATA": "none"})
    except GitTimeout:
        return Signing(True, f"commit.gpgsign is on, but signing with {program} ({fmt}) waited over {timeout:g}s "
                             f"(a passphrase prompt nobody answers at night)")
    except (GitFailed, OSError) as exc:
        return Signing(True, f"commit.gpgsign is on, but signing with {program} ({fmt}) could not run ({exc})")
    if tried.returncode != 0:
        why = (tried.stderr.strip().splitlines() or ["no reason given"])[-1][:200]
        return Signing(True, f"commit.gpgsign is on, but signing with {program} ({fmt}) failed: {why}")
    return Signing(True)


def save(path: Path, run_id: str, signing: Signing) -> None:
    write_json(path, {"run_id": run_id, "configured": signing.configured, "unsigned": signing.unsigned})


def load(path: Path, run_id: str) -> Signing | None:
    """The run's answer; None when there is none for this run."""
    try:
        data = read_json(path)
    except (CorruptFile, OSError):
        return None
    if not isinstance(data, dict) or data.get("run_id") != run_id:
        return None
    return Signing(bool(data.get("configured")), str(data.get("unsigned") or ""))


def unsigned_for(project: Path, state_dir: Path, run_id: str) -> str:
    """Why this commit of the run is made unsigned, or "" to sign as configured. Signing turned
    on after the start (the agent can write .git/config), or the start's answer gone, is never
    tried unattended."""
    if not _on(project):
        return ""
    saved = load(signing_file(state_dir), run_id)
    if saved is None or not saved.configured:
        return "commit.gpgsign is on, but was not when the run started (its signing was never tried)"
    return saved.unsigned
