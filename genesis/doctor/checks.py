"""What `genesis doctor` checks: each a record of what it found and the one command that fixes it.

Every check asks the code the loop itself runs (its preflight's reasons, the hook's
self-test, the box's probe, the settings), so the doctor says what the loop would do, and
nothing is judged twice. Every command it runs is bounded in time; nothing is sent, written
or installed (the hook's self-test writes a heartbeat into a scratch folder of its own).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from genesis.agents import Adapter, adapter_named, adapter_of
from genesis.agents.base import LOGGED_IN, LOGGED_OUT
from genesis.agents.hook.selftest import MALFORMED, check_outside_loop
from genesis.alerts.channels import banner, configured
from genesis.config import KNOBS, Config, ConfigError, Setting, advice, build, layout_for, resolve
from genesis.doctor.versions import VERSION_TIMEOUT, parse_version, version_of
from genesis.hints import hint, program
from genesis.loop.preflight import agent_problem, root_problem
from genesis.repo.autocommit import user_changes
from genesis.agents.generic import NO_HOOK, says_no_hook
from genesis.repo.gitcmd import GitFailed, NotARepository, NotOwned, run_git
from genesis.repo.ownership import leftovers_in, recall
from genesis.repo.progress import check_work_tree
from genesis.repo.state import OPERATION_NAMES, repo_state, way_out
from genesis.sandbox.box import ALLOW_NET, NONE, OFF, Unavailable, choose
from genesis.sandbox.detect import INSTALL_BWRAP, probe
from genesis.sandbox.nethosts import default_allowlist
from genesis.sandbox.places import Places
from genesis.store.layout import UnsafeDir

__all__ = ["Check", "OK", "WARN", "FAIL", "MIN_GIT", "run_all", "project_to_check", "doctor_config",
           "git_checks", "project_checks", "agent_checks", "box_check", "hook_check", "alerts_check"]

OK, WARN, FAIL = "ok", "warn", "fail"
# `git rev-parse --path-format` (a fleet's worktrees) came in git 2.31; `git switch` (the way
# off a detached HEAD Genesis names) in 2.23, `update-ref --stdin` transactions in 2.17.
MIN_GIT = (2, 31)
GIT_BOUND = 10.0   # seconds for each git the doctor runs
GENESIS_CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULTS = {k.name: str(k.default) for k in KNOBS if k.default is not None}


@dataclass(frozen=True)
class Check:
    name: str          # what was checked: "git", "project", "agent CLI", "box", ...
    level: str         # OK | WARN (the night can run) | FAIL (the loop refuses, or the night is lost)
    found: str         # what it found, in plain words
    fix: str = ""      # the one command that fixes it ("" when nothing needs fixing)

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def run_all(project: Path | None, cfg: Config, agent: Adapter, env: Mapping[str, str],
            euid: int | None = None, settings_error: str = "", skipped: str = "") -> list[Check]:
    """Every check, in the order a newcomer fixes them: git, the project, the agent CLI, the box,
    the hook, the alerts. No project (skipped says why): the machine's checks alone."""
    where = project or Path.cwd()
    checks = git_checks(project, env)
    if settings_error:
        checks.append(Check("settings", FAIL, settings_error, f"{hint(where, 'config', 'show')}"))
    checks += [Check("settings", WARN, doubt) for doubt in advice(cfg, env)]
    if project is None:
        checks.append(Check("project", WARN, f"not checked ({skipped or 'none given'}); name one with --project",
                            f"{program()} --project DIR doctor"))
    checks += project_checks(project, cfg)
    checks += agent_checks(cfg, agent, project, env, euid)
    checks.append(box_check(cfg, where, env))
    checks.append(hook_check(agent, project, env))
    alerts = alerts_check(cfg, where, env)
    return checks + ([alerts] if alerts else [])


def project_to_check(path: Path, given: bool) -> tuple[Path | None, str]:
    """The project to check, or None with why not: a --project given is always checked; the
    current directory only when it is a git work tree (and not Genesis's own checkout)."""
    path = Path(path).resolve()
    if given:
        return path, ""
    if path == GENESIS_CHECKOUT:
        return None, "here is Genesis's own checkout"
    try:
        check_work_tree(path, timeout=GIT_BOUND)
    except NotOwned:
        return path, ""
    except (NotARepository, GitFailed, OSError) as exc:
        return None, str(exc).split(";")[0]
    return path, ""


def doctor_config(project: Path, overrides: Mapping[str, str], agent: str | None) -> tuple[Config, str]:
    """The settings the loop would run with (for another CLI when `agent` names one), and the
    settings' error when they are broken (then the defaults, so the other checks still run)."""
    chosen: dict[str, str] = {}
    if agent:
        default = DEFAULTS["GENESIS_AGENT_CMD"]
        chosen = {"GENESIS_AGENT_CLI": agent,
                  "GENESIS_AGENT_CMD": default if agent == "claude" else adapter_named(agent).program}
    try:
        cfg = resolve(project, flags=overrides)
        if agent and adapter_of(cfg).name != agent:
            cfg = resolve(project, flags={**overrides, **chosen})
        return cfg, ""
    except ConfigError as exc:
        settings = {key: Setting(value, "default") for key, value in DEFAULTS.items()}
        return build(project, {**settings, **{k: Setting(v, "flag") for k, v in chosen.items()}}), str(exc)


# --- git ---------------------------------------------------------------------------------

def git_checks(project: Path | None, env: Mapping[str, str]) -> list[Check]:
    """git on PATH and new enough; the name and email its commits will carry."""
    home = Path(env.get("HOME") or "/")
    where = project if project is not None and _usable(project) else home if home.is_dir() else Path("/")
    try:
        done = run_git(where, ["--version"], timeout=GIT_BOUND)
    except FileNotFoundError:
        return [Check("git", FAIL, "git is not installed (not found on PATH)", _system_install("git"))]
    except (GitFailed, OSError) as exc:
        return [Check("git", FAIL, f"git does not run: {exc}", _system_install("git"))]
    said = done.text.strip()
    version = parse_version(said)
    if version is None:
        checks = [Check("git", WARN, f"cannot tell git's version from {said!r}")]
    elif version[:2] < MIN_GIT:
        need = ".".join(map(str, MIN_GIT))
        checks = [Check("git", FAIL, f"{said}: older than {need}, which Genesis needs", _system_install("git"))]
    else:
        checks = [Check("git", OK, said)]
    try:
        ident = run_git(where, ["var", "GIT_AUTHOR_IDENT"], timeout=GIT_BOUND)
    except (GitFailed, OSError) as exc:
        return checks + [Check("git identity", WARN, f"cannot tell who git's commits are made as ({exc})")]
    if ident.returncode == 0:
        who = ident.text.strip().rsplit(">", 1)[0] + ">"
        checks.append(Check("git identity", OK, f"commits are made as {who}"))
    else:
        checks.append(Check("git identity", FAIL, "git does not know who you are, so no commit can be made "
                            "(auto-commit, the safety refs)", 'git config --global user.name "Your Name" && '
                            'git config --global user.email "you@example.com"'))
    return checks


def _usable(project: Path) -> bool:
    try:
        check_work_tree(project, timeout=GIT_BOUND)
    except (NotARepository, GitFailed, OSError):
        return False
    return True


# --- the project -------------------------------------------------------------------------

def project_checks(project: Path | None, cfg: Config) -> list[Check]:
    """A work tree git works in, no operation in progress, on a branch, nothing of the user's
    uncommitted: what the loop's preflight refuses."""
    if project is None:
        return []
    git_c = f"git -C {shlex.quote(str(project))}"
    try:
        check_work_tree(project, timeout=GIT_BOUND)
    except NotOwned as exc:
        return [Check("project", FAIL, str(exc).split("; if you trust")[0], exc.fix)]
    except (NotARepository, GitFailed, OSError) as exc:
        return [Check("project", FAIL, str(exc), f"{git_c} init")]
    checks = [Check("project", OK, f"{project} is a git work tree")]
    try:
        state = repo_state(project, timeout=GIT_BOUND)
    except GitFailed as exc:
        return checks + [Check("repository state", FAIL, f"cannot tell ({exc})", f"{git_c} status")]
    if state.operations:
        what = " and ".join(OPERATION_NAMES[op] for op in state.operations)
        checks.append(Check("repository state", FAIL, f"{what} in progress: the loop refuses to start in the "
                            f"middle of it", way_out(state.operations[0], project)))
    elif state.detached:
        checks.append(Check("repository state", FAIL, f"HEAD is detached (at {state.head or 'no commit'}): the "
                            f"loop refuses to start on no branch", f"{git_c} switch -c genesis-night"))
    else:
        checks.append(Check("repository state", OK, f"on branch {state.branch}, nothing in progress"))
    return checks + [_changes_check(project, cfg, git_c)]


def _changes_check(project: Path, cfg: Config, git_c: str) -> Check:
    """The user's uncommitted tracked changes refuse the start (auto-commit would take them as the
    agent's); what an earlier run's agent left is not the user's, as the preflight tells."""
    try:
        found = user_changes(project, timeout=GIT_BOUND)
        earlier = recall(layout_for(cfg).leftovers_file)
        agents = set(leftovers_in(earlier, project, found.changed)) if earlier else set()
    except (GitFailed, UnsafeDir, OSError) as exc:
        return Check("uncommitted changes", FAIL, f"cannot tell ({exc})", f"{git_c} status")
    if found.unmerged:
        return Check("uncommitted changes", FAIL, f"files with unresolved conflicts: {_listing(found.unmerged)}; "
                     f"resolve them, then `git add` them", f"{git_c} add {shlex.join(found.unmerged)}")
    changed = [p for p in found.changed if p not in agents]
    if changed:
        return Check("uncommitted changes", FAIL, f"uncommitted changes of yours: {_listing(changed)}; the loop "
                     f"refuses them (commit them, stash them, or start with --allow-dirty)", f"{git_c} stash")
    untracked = f"; {len(found.untracked)} untracked file(s), left out of every commit" if found.untracked else ""
    return Check("uncommitted changes", OK, f"none of yours{untracked}")


def _listing(paths, most: int = 5) -> str:
    paths = list(paths)
    return ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")


# --- the agent CLI -----------------------------------------------------------------------

def agent_checks(cfg: Config, agent: Adapter, project: Path | None, env: Mapping[str, str],
                 euid: int | None = None) -> list[Check]:
    """The agent command found and runnable, its version, its login, and root with Claude Code."""
    name = agent.name if agent.name != "generic" else Path(cfg.agent_cmd[0]).name
    problem = agent_problem(cfg)
    install = agent.install or "install it, or set GENESIS_AGENT_CMD to the agent's command line"
    if problem:
        fix = problem.rsplit("run: ", 1)[1] if "chmod +x" in problem else install
        checks = [Check("agent CLI", FAIL, problem.split("; ")[0], fix)]
    else:
        checks = [_version_check(cfg, agent, project, env, name)]
    login = agent.login(env, project)
    level = OK if login.state == LOGGED_IN else FAIL if login.state == LOGGED_OUT else WARN
    checks.append(Check(f"{name} login", level, login.found, agent.login_command if level != OK else ""))
    root = root_problem(cfg, euid, env)
    if root:
        checks.append(Check("root", FAIL, root, "export IS_SANDBOX=1"))
    return checks


def _version_check(cfg: Config, agent: Adapter, project: Path | None, env: Mapping[str, str], name: str) -> Check:
    command = cfg.agent_cmd[0]  # found and executable (agent_problem): a path from the project, or on PATH
    path = str(cfg.project / command) if "/" in command else shutil.which(command) or command
    said = version_of(path, project or Path.cwd(), env, VERSION_TIMEOUT)
    if said.problem:
        return Check("agent CLI", WARN, f"{path}: {said.problem}", agent.install)
    tested = f" (Genesis is tested with {agent.version})" if agent.version else ""
    return Check("agent CLI", OK, f"{path}: {said.line}{tested}")


# --- the box -----------------------------------------------------------------------------

def box_check(cfg: Config, where: Path, env: Mapping[str, str]) -> Check:
    """The box GENESIS_SANDBOX picks on this machine (the loop's own probe and choice)."""
    # What the box keeps visible does not change which box runs: the places of no loop in particular.
    places = Places(project=str(where), cwd=str(where), home=env.get("HOME"), tmpdir=env.get("TMPDIR"), visible=(),
                    protected=(), beats="")
    machine = probe()
    agent = adapter_of(cfg)
    allowed = (default_allowlist(agent.name, agent.network_hosts(env), cfg.project, cfg.network_allow)
               if cfg.network == ALLOW_NET else None)
    try:
        box = choose(cfg.sandbox, machine, places, cfg.network, allowed)
    except Unavailable as exc:
        if cfg.network != "open" and "GENESIS_NETWORK" in str(exc):
            return Check("box", FAIL, str(exc), "export GENESIS_NETWORK=open")
        return Check("box", FAIL, str(exc), _bwrap_install() if cfg.sandbox == "bwrap" else
                     "export GENESIS_SANDBOX=auto")
    line = box.line().removeprefix("sandbox: ")
    if box.kind == OFF:
        return Check("box", WARN, line, "export GENESIS_SANDBOX=auto")
    if box.kind == NONE:
        fix = _bwrap_install() if sys.platform.startswith("linux") and shutil.which("bwrap") is None else ""
        return Check("box", WARN, line, fix)
    return Check("box", OK, f"{cfg.sandbox}: {line}" if cfg.sandbox != "auto" else f"auto picks {line}")


def _bwrap_install() -> str:
    return _system_install("bubblewrap") or INSTALL_BWRAP


def _system_install(package: str) -> str:
    """The command that installs a system package here ("" when no package manager is known)."""
    sudo = "sudo " if os.geteuid() != 0 else ""
    for manager, verb in (("apt-get", "install"), ("dnf", "install"), ("yum", "install"), ("pacman", "-S"),
                          ("zypper", "install"), ("apk", "add")):
        if shutil.which(manager):
            return f"{sudo}{manager} {verb} {package}"
    if sys.platform == "darwin" and package == "git":
        return "xcode-select --install"
    return ""


# --- the hook ----------------------------------------------------------------------------

def hook_check(agent: Adapter, project: Path | None, env: Mapping[str, str]) -> Check:
    """The hook run as installed, as `genesis hook status` runs it."""
    where = project or Path.cwd()
    check = check_outside_loop(agent, where, env)
    if check is None:
        return Check("hook", OK, f"{agent.name} has no per-tool-call hook: its output and its processes' "
                     f"activity are its signs of life")
    if check.ok:
        return Check("hook", OK, check.detail)
    if says_no_hook(agent, check):
        return Check("hook", OK, NO_HOOK)
    level = FAIL if agent.hook_required or check.state == MALFORMED else WARN
    found = check.detail.split("; run: ")[0]
    if check.state == MALFORMED:
        return Check("hook", level, found, f"edit {check.path}" if check.path else "")
    args = ("hook", "install") + (("--scope", "local") if agent.name in ("claude", "generic") and project
                                  else ()) + (("--agent", agent.name) if agent.name not in ("claude", "generic")
                                              else ())
    return Check("hook", level, found, hint(where, *args))


# --- alerts ------------------------------------------------------------------------------

def alerts_check(cfg: Config, where: Path, env: Mapping[str, str]) -> Check | None:
    """The alert channels set, and what each gets (none is sent); None when none is set."""
    states = configured(cfg.alerts, env)
    if not any(s.name != "desktop" or cfg.alerts.desktop == "true" or not s.off for s in states):
        return None
    said = banner(states, hint(where, "alert", "test")).removeprefix("alerts: ")
    return Check("alerts", OK, said)
