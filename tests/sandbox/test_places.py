"""What the box keeps visible under its private /tmp, and what it keeps read-only."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import genesis
from genesis.sandbox.places import places_for

PACKAGE = Path(genesis.__file__).resolve().parent


def _places(project: Path, env: dict, argv=("sh",), package: Path = PACKAGE):
    state = project / ".git" / "genesis"
    (state / "heartbeats").mkdir(parents=True, exist_ok=True)
    return places_for(project, state, state / "heartbeats", project / "orchestrator" / "logs",
                      project / "orchestrator" / "genesis.conf", package, argv, env)


def _covers(top: str, path: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def test_state_conf_and_code_are_protected_and_the_beats_stay_writable(project):
    conf = project / "orchestrator" / "genesis.conf"
    conf.parent.mkdir()
    conf.write_text("AUTO_PUSH=false\n")
    places = _places(project, {"PATH": os.environ["PATH"], "HOME": str(project.parent / "home")})
    real = os.path.realpath(project)
    assert places.protected[:2] == (f"{real}/.git/genesis", f"{real}/orchestrator/genesis.conf")
    code = (PACKAGE, Path(sys.prefix), Path(sys.base_prefix))  # the package, its venv, the base interpreter
    assert all(any(_covers(p, str(c.resolve())) for p in places.protected) for c in code)
    assert places.beats == f"{real}/.git/genesis/heartbeats"


def test_code_inside_the_project_is_the_agents_work(project):
    package = project / "genesis"
    package.mkdir()
    places = _places(project, {"PATH": ""}, package=package)
    assert str(package) not in places.protected


def test_what_the_agent_was_given_under_tmp_is_bound_back_but_never_a_socket(project, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "agent").write_text("#!/bin/sh\n")
    (tools / "agent").chmod(0o755)
    named = tmp_path / "data.txt"
    named.write_text("x")
    sock_path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    try:
        env = {"PATH": f"{tools}:/usr/bin", "HOME": str(tmp_path / "home"), "DATA": str(named),
               "SSH_AUTH_SOCK": str(sock_path)}
        places = _places(project, env, argv=("agent",))
    finally:
        server.close()
    visible = places.visible
    assert os.path.realpath(tmp_path) not in visible  # only what was named, not its folder
    for path in (project, tools, named, tmp_path / "home"):
        assert os.path.realpath(path) in visible or any(os.path.realpath(path).startswith(v + "/") for v in visible)
    assert os.path.realpath(sock_path) not in visible
    assert list(visible) == sorted(visible, key=lambda p: (p.count("/"), p))  # parents first


def test_a_venv_agent_under_tmp_brings_its_venv_and_the_python_it_was_made_from(project, tmp_path):
    base = tmp_path / "python"   # a Python installed under /tmp (pyenv, a tarball), and a venv of it
    (base / "bin").mkdir(parents=True)
    (base / "lib" / "python3.12").mkdir(parents=True)
    (base / "bin" / "python3").write_text("")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\ninclude-system-site-packages = false\n")
    (venv / "bin" / "python").symlink_to(base / "bin" / "python3")
    agent = venv / "bin" / "agent"
    agent.write_text(f"#!{venv / 'bin' / 'python'}\nimport agent_main\n")
    agent.chmod(0o755)
    places = _places(project, {"PATH": "/usr/bin"}, argv=(str(agent),))
    assert {os.path.realpath(venv), os.path.realpath(base)} <= set(places.visible)
    assert os.path.realpath(tmp_path) not in places.visible   # their roots, not the folder above them
