"""What of HOME the box keeps (pure: paths in, binds out) and GENESIS_BOX_ALLOW's grammar."""

from __future__ import annotations

import pytest

from genesis.sandbox.home import Allowed, AllowError, allowed_env, kept, parse_allow

HOME = "/home/u"
THERE = {f"{HOME}/{p}" for p in (".claude", ".claude.json", ".npm", ".cargo", ".cargo/credentials.toml", "go",
                                  "proj")}


def test_the_agents_places_and_existing_caches_are_writable_its_tools_read_only_parents_first():
    binds, hidden = kept(HOME, [f"{HOME}/.claude", f"{HOME}/.claude.json"],
                         [f"{HOME}/.pyenv/shims", f"{HOME}/.local/bin", f"{HOME}/.cargo/bin", "/usr/bin",
                          f"{HOME}/.nvm/versions/node/v22/bin"],
                         writable=[f"{HOME}/proj", "/tmp/x"], exists=THERE.__contains__)
    assert binds == ((f"{HOME}/proj", True), (f"{HOME}/.claude", True), (f"{HOME}/.claude.json", True),
                     (f"{HOME}/.npm", True), (f"{HOME}/.cargo", True), (f"{HOME}/go", True),
                     (f"{HOME}/.pyenv", False), (f"{HOME}/.nvm", False), (f"{HOME}/.local/bin", False))
    assert hidden == (f"{HOME}/.cargo/credentials.toml",)  # inside a kept cache: covered again


def test_nothing_missing_is_kept_and_home_itself_never_is():
    binds, hidden = kept(HOME, [f"{HOME}/.codex", HOME], [HOME], exists=lambda p: False)
    assert binds == () and hidden == ()


@pytest.mark.parametrize("value, said", [
    ("~/.kube:rx", "unknown mode 'rx'"),
    ("relative/path", "not an absolute path"),
    ("~/x", "`~` needs HOME set"),
])
def test_a_bad_allow_entry_says_what_to_write(value, said):
    with pytest.raises(AllowError, match=said):
        parse_allow(value, "" if "~/x" == value else HOME)


def test_allow_reads_modes_and_a_colon_inside_a_path():
    assert parse_allow(" ~/.kube:ro ,/opt/a:b:rw,~ ,/srv/c:1", HOME) == (
        Allowed(f"{HOME}/.kube", False), Allowed("/opt/a:b", True), Allowed(HOME, False), Allowed("/srv/c:1", False))
    assert parse_allow("", HOME) == ()


def test_a_variable_pointing_at_an_allowed_path_passes():
    allow = parse_allow("/run/user/1/ssh:rw", HOME)
    assert allowed_env({"SSH_AUTH_SOCK": "/run/user/1/ssh/agent.1", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/x"},
                       allow) == {"SSH_AUTH_SOCK"}
