"""The project's work tree opened with GitPython, for the checks only it makes.

Importing GitPython costs about 60 ms, so only the step that needs it (preflight, once a
run) loads this module; every other step runs git itself, within bounds (gitcmd).
"""

from __future__ import annotations

import os
from pathlib import Path

import git

from genesis.repo.gitcmd import NotARepository
from genesis.repo.gitenv import env_for
from genesis.repo.progress import check_work_tree

__all__ = ["open_repo"]


def open_repo(project: Path):
    """The git work tree at project as a GitPython Repo, or NotARepository with what to do."""
    check_work_tree(project)  # bounded: git reads what GitPython would read unbounded
    try:
        # GitPython expands $VARS and ~ in a str path unless told not to: a directory named
        # `$HOME` is a name here. An absolute path leaves no leading ~ to expand either.
        repo = git.Repo(os.path.abspath(project), search_parent_directories=False, expand_vars=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise NotARepository(f"{project} is not a git work tree; run `git init` there or pass "
                             f"--project with a git project") from None
    # Its command wrapper expands a str working directory whatever Repo was told, so git
    # would run in another directory; a Path is taken literally.
    repo.git = repo.GitCommandWrapperType(Path(repo.working_tree_dir))
    repo.git.update_environment(**env_for(Path(repo.working_tree_dir)))  # as gitcmd's: nothing of the agent's runs
    return repo
