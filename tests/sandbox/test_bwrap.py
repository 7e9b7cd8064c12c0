"""The bubblewrap box, run for real: Genesis's state and code read-only, the beats writable,
the loop out of sight, a private /tmp."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import genesis
from genesis.sandbox.bwrap import bwrap_argv
from genesis.sandbox.detect import probe
from genesis.sandbox.places import Places, places_for

MACHINE = probe()
NOBODY = 65534
PACKAGE = Path(genesis.__file__).resolve().parent
needs_bwrap = pytest.mark.skipif(MACHINE.bwrap is None, reason=f"no bubblewrap here: {MACHINE.bwrap_why}")


def _places(project: Path) -> Places:
    state = project / ".git" / "genesis"
    (state / "heartbeats").mkdir(parents=True, exist_ok=True)
    return places_for(project, state, state / "heartbeats", project / "orchestrator" / "logs",
                      project / "orchestrator" / "genesis.conf", PACKAGE, ("sh",),
                      {"PATH": "/usr/bin:/bin", "HOME": str(project.parent / "home")})


def test_the_argv_binds_in_order():
    places = Places("/tmp/p", "/tmp/p", "/root", "/tmp/mine", ("/tmp/p",), ("/tmp/p/.git/genesis", "/opt/g"),
                    "/tmp/p/.git/genesis/heartbeats")
    argv = bwrap_argv("/usr/bin/bwrap", places, ("claude", "-p"))
    text = " ".join(argv)
    assert text.index("--bind / /") < text.index("--tmpfs /tmp") < text.index("--bind /tmp/p /tmp/p") \
        < text.index("--ro-bind /tmp/p/.git/genesis") < text.index("--bind /tmp/p/.git/genesis/heartbeats")
    assert "--dir /tmp/mine" in text  # a TMPDIR under /tmp that is not there: made empty in the box
    for flag in ("--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session", "--dev /dev",
                 "--proc /proc", "--chdir /tmp/p"):
        assert flag in text
    assert argv[-3:] == ("--", "claude", "-p")


@needs_bwrap
def test_in_the_box_state_and_code_are_read_only_and_beats_writable(project):
    places = _places(project)
    planted = PACKAGE / f"planted-by-test-{project.parent.name}"
    act = ("echo x > .git/genesis/planted; echo $? ; echo y > .git/genesis/heartbeats/Builder.json; echo $?; "
           f"touch {planted}; echo $?; echo w > work.txt; echo $?")
    try:
        done = subprocess.run(bwrap_argv(MACHINE.bwrap, places, ("sh", "-c", act)), cwd=project, capture_output=True,
                              text=True, timeout=30)
        assert not planted.exists()
    finally:
        planted.unlink(missing_ok=True)
    assert done.stdout.split() == ["2", "0", "1", "0"], done.stderr
    assert "Read-only file system" in done.stderr
    assert not (project / ".git" / "genesis" / "planted").exists()
    assert (project / ".git" / "genesis" / "heartbeats" / "Builder.json").read_text() == "y\n"
    assert (project / "work.txt").read_text() == "w\n"


@needs_bwrap
def test_in_the_box_the_loop_is_out_of_sight_and_tmp_is_private(project, tmp_path):
    outside = Path("/tmp") / f"genesis-test-outside-{tmp_path.name}"
    outside.write_text("host")
    try:
        act = f"ps -e -o pid= | wc -l; kill -0 {os.getpid()}; echo $?; cat {outside}; echo $?; echo $$"
        done = subprocess.run(bwrap_argv(MACHINE.bwrap, _places(project), ("sh", "-c", act)), cwd=project,
                              capture_output=True, text=True, timeout=30)
    finally:
        outside.unlink()
    lines = done.stdout.split()
    assert int(lines[0]) <= 5            # bwrap's init, sh, ps, wc: the box's own
    assert lines[1] != "0"               # the test's own process: no such process in the box
    assert lines[2] != "0"               # a file of the host's /tmp is not there
    assert lines[3] == "2"               # the agent's pid in its namespace


def _run_boxed(project: Path, argv: tuple[str, ...]) -> subprocess.CompletedProcess:
    """argv run in the box as the agent, with an environment that names nothing else under /tmp
    (no OLDPWD, no TMPDIR): only what places_for finds from the program itself is bound back."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(project.parent / "home")}
    state = project / ".git" / "genesis"
    (state / "heartbeats").mkdir(parents=True, exist_ok=True)
    places = places_for(project, state, state / "heartbeats", project / "orchestrator" / "logs",
                        project / "orchestrator" / "genesis.conf", PACKAGE, argv, env)
    return subprocess.run(bwrap_argv(MACHINE.bwrap, places, argv), cwd=project, env=env, capture_output=True,
                          text=True, timeout=60)


@needs_bwrap
def test_an_agent_installed_in_a_venv_under_tmp_runs_in_the_box_with_its_modules(project, tmp_path):
    venv = tmp_path / "tools" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "agentlib.py").write_text('WORDS = "imported from the venv"\n')
    agent = venv / "bin" / "agent"   # a console script, as pip writes one
    agent.write_text(f"#!{venv}/bin/python\nimport agentlib\nprint(agentlib.WORDS)\n")
    agent.chmod(0o755)
    done = _run_boxed(project, (str(agent),))
    assert (done.returncode, done.stdout) == (0, "imported from the venv\n"), done.stderr


@needs_bwrap
@pytest.mark.parametrize("layout", ["global", "local"])
def test_an_npm_cli_linked_from_a_bin_folder_under_tmp_runs_in_the_box_with_its_packages(project, tmp_path, layout):
    if shutil.which("node", path="/usr/bin:/bin") is None:
        pytest.skip("no node in /usr/bin or /bin")
    # global: `npm install -g --prefix P` (P/bin/cli -> ../lib/node_modules/pkg/cli.js); local: a
    # project's node_modules/.bin/cli -> ../pkg/cli.js. The dependency is hoisted beside the package.
    modules = tmp_path / "npm" / ("lib/node_modules" if layout == "global" else "node_modules")
    bin_dir = tmp_path / "npm" / "bin" if layout == "global" else modules / ".bin"
    (modules / "pkg").mkdir(parents=True)
    (modules / "dep").mkdir()
    (modules / "dep" / "index.js").write_text('module.exports = "required from its node_modules";\n')
    cli = modules / "pkg" / "cli.js"
    cli.write_text('#!/usr/bin/env node\nconsole.log(require("dep"));\n')
    cli.chmod(0o755)
    bin_dir.mkdir(parents=True)
    (bin_dir / "cli").symlink_to(os.path.relpath(cli, bin_dir))
    done = _run_boxed(project, (str(bin_dir / "cli"),))
    assert (done.returncode, done.stdout) == (0, "required from its node_modules\n"), done.stderr


as_root = pytest.mark.skipif(os.geteuid() != 0 or MACHINE.bwrap is None or bool(MACHINE.root_why),
                             reason="needs root and a bubblewrap that can drop root's capabilities")
UNMOUNT = ("umount -l .git/genesis; echo $?; echo x > .git/genesis/planted; echo $?; "
           "grep CapEff /proc/self/status")


@as_root
def test_as_root_the_box_drops_every_capability_and_the_state_bind_cannot_be_unmounted(project):
    done = subprocess.run(bwrap_argv(MACHINE.bwrap, _places(project), ("sh", "-c", UNMOUNT), root=True),
                          cwd=project, capture_output=True, text=True, timeout=30)
    lines = done.stdout.split("\n")
    assert lines[0] != "0" and lines[1] != "0", done.stderr  # umount refused; the state stays read-only
    assert lines[2].split() == ["CapEff:", "0000000000000000"]
    assert not (project / ".git" / "genesis" / "planted").exists()


@as_root
def test_as_root_a_box_that_kept_its_capabilities_could_unmount_it(project):
    # Why the flags matter: the same box without them lets root take the read-only bind away.
    done = subprocess.run(bwrap_argv(MACHINE.bwrap, _places(project), ("sh", "-c", UNMOUNT)), cwd=project,
                          capture_output=True, text=True, timeout=30)
    assert done.stdout.split("\n")[:2] == ["0", "0"], done.stderr
    (project / ".git" / "genesis" / "planted").unlink()


def _nobody_sees(path: str) -> bool:
    argv = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", "test", "-e", path)
    return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0 or MACHINE.bwrap is None or shutil.which("setpriv") is None,
                    reason="needs root (to become a normal user with setpriv) and bubblewrap")
def test_as_a_normal_user_the_box_cannot_unmount_the_state_bind_either():
    base = Path(tempfile.mkdtemp(prefix="genesis-test-user-", dir="/tmp"))
    try:
        base.chmod(0o755)
        project = base / "project"
        project.mkdir()
        (base / "home").mkdir()
        places = _places(project)
        # The code this root process runs from may lie where the normal user cannot go (root's pyenv):
        # a normal user's Genesis runs from code it can read, so the box binds only such code here.
        places = dataclasses.replace(places, protected=tuple(p for p in places.protected if _nobody_sees(p)))
        for path in (base / "home", project, *project.rglob("*")):
            os.chown(path, NOBODY, NOBODY)
        argv = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                *bwrap_argv(MACHINE.bwrap, places, ("sh", "-c", UNMOUNT)))
        done = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=30)
        if "No permissions to create" in done.stderr or "setting up uid map" in done.stderr:
            pytest.skip(f"bubblewrap cannot run as a normal user here: {done.stderr.strip()}")
        lines = done.stdout.split("\n")
        assert lines[0] != "0" and lines[1] != "0", done.stderr
        assert lines[2].split() == ["CapEff:", "0000000000000000"]
        assert not (project / ".git" / "genesis" / "planted").exists()
    finally:
        shutil.rmtree(base)


@pytest.mark.fault(203)
@needs_bwrap
def test_in_the_box_the_base_interpreter_and_site_dirs_are_read_only(project):
    """A sitecustomize.py in the base interpreter's stdlib, a .pth in the venv's site-packages:
    each would run in every later Genesis process, outside the box."""
    import site
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    targets = [stdlib / f"sitecustomize-{project.parent.name}.py"]
    targets += [Path(p).resolve() / f"planted-{project.parent.name}.pth" for p in site.getsitepackages()
                if Path(p).is_dir()]
    act = "; ".join(f"echo 'import os' > {t} 2>/dev/null; echo $?" for t in targets)
    try:
        done = subprocess.run(bwrap_argv(MACHINE.bwrap, _places(project), ("sh", "-c", act), root=MACHINE.root),
                              cwd=project, capture_output=True, text=True, timeout=30)
        assert not any(t.exists() for t in targets)
    finally:
        for t in targets:
            t.unlink(missing_ok=True)
    assert len(done.stdout.split()) == len(targets) >= 2 and "0" not in done.stdout.split(), done.stderr
