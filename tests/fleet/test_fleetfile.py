"""The fleet file (`--fleet fleet.toml`): every mistake refused, saying what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.git import new_repo

from genesis.fleet.fleetfile import MAX_BYTES, MAX_PROJECTS, FleetFileError, load


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_fleet_file_lists_projects_with_their_parallel_and_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    app = new_repo(tmp_path / "home" / "src" / "app")
    api = new_repo(tmp_path / "api")
    ff = load(write(tmp_path / "fleet.toml", """
max_parallel = 3

[[project]]
path = "~/src/app"
parallel = 2
[project.settings]
GENESIS_AGENT_CMD = "claude -p"
GENESIS_MAX_ITERATIONS = 40
AUTO_PUSH = false

[[project]]
path = "api"          # relative to the file
parallel = "auto"
"""))
    assert ff.path == tmp_path / "fleet.toml" and ff.max_parallel == 3
    assert [p.path for p in ff.projects] == [app.resolve(), api.resolve()]
    assert [p.parallel for p in ff.projects] == ["2", "auto"]
    assert dict(ff.projects[0].settings) == {"GENESIS_AGENT_CMD": "claude -p", "GENESIS_MAX_ITERATIONS": "40",
                                             "AUTO_PUSH": "false"}
    assert dict(ff.projects[1].settings) == {}


def test_parallel_defaults_to_one_and_max_parallel_to_none(tmp_path):
    new_repo(tmp_path / "p")
    ff = load(write(tmp_path / "f.toml", '[[project]]\npath = "p"\n'))
    assert ff.max_parallel is None and ff.projects[0].parallel == "1"


@pytest.mark.parametrize("text, said", [
    ('max_paralel = 2\n[[project]]\npath = "p"\n', "unknown key 'max_paralel' in the file's top level; did you "
                                                   "mean 'max_parallel'?"),
    ('[[project]]\npath = "p"\nparalel = 2\n', "unknown key 'paralel' in [[project]]; did you mean 'parallel'?"),
    ('[[project]]\npath = "p"\n[project.settings]\nGENESIS_AGENT_CMND = "x"\n',
     "unknown setting GENESIS_AGENT_CMND; did you mean GENESIS_AGENT_CMD?"),
    ('[[project]]\npath = "p"\nparallel = 0\n', "parallel = 0: expected a whole number from 1 to 64, or \"auto\""),
    ('[[project]]\npath = "p"\nparallel = "many"\n', "parallel = 'many'"),
    ('[[project]]\npath = "p"\n[project.settings]\nGENESIS_AGENT_CMD = ["a"]\n',
     "GENESIS_AGENT_CMD must be a string"),
    ('max_parallel = 0\n[[project]]\npath = "p"\n', "max_parallel = 0"),
    ('[[project]]\nparallel = 1\n', 'path = "..." is missing'),
    ("max_parallel = 2\n", "lists no project"),
    ("[[project]\n", "is not valid TOML"),
    ('[[project]]\npath = "nowhere"\n', "is not a directory"),
    ('[[project]]\npath = "plain"\n', "is not a git work tree"),
    ('[[project]]\npath = "p/sub"\n', "is inside the git work tree"),
    ('[[project]]\npath = "p"\n[[project]]\npath = "./p/"\n', "is listed twice (projects 1 and 2): keep one"),
])
def test_each_mistake_is_refused_saying_what_to_fix(tmp_path, monkeypatch, text, said):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # "plain" is no work tree wherever the test runs
    new_repo(tmp_path / "p")
    (tmp_path / "p" / "sub").mkdir()
    (tmp_path / "plain").mkdir()
    with pytest.raises(FleetFileError) as caught:
        load(write(tmp_path / "f.toml", text))
    assert said in str(caught.value) and str(tmp_path / "f.toml") in str(caught.value)


def test_a_missing_file_a_huge_one_and_too_many_projects_are_refused(tmp_path):
    with pytest.raises(FleetFileError, match="no fleet file"):
        load(tmp_path / "absent.toml")
    with pytest.raises(FleetFileError, match=f"more than the {MAX_BYTES} allowed"):
        load(write(tmp_path / "big.toml", "# " + "x" * MAX_BYTES + "\n"))
    for n in range(MAX_PROJECTS + 1):
        new_repo(tmp_path / f"p{n}")
    many = "".join(f'[[project]]\npath = "p{n}"\n' for n in range(MAX_PROJECTS + 1))
    with pytest.raises(FleetFileError, match=f"lists {MAX_PROJECTS + 1} projects, more than the {MAX_PROJECTS}"):
        load(write(tmp_path / "many.toml", many))
