"""Which box GENESIS_SANDBOX gets on a machine, and the start-up line that says what it protects."""

from __future__ import annotations

import socket
from dataclasses import replace

import pytest

from genesis.sandbox.allowlist import Allowlist, parse_entries
from genesis.sandbox.box import Unavailable, choose
from genesis.sandbox.detect import Machine
from genesis.sandbox.home import Allowed
from genesis.sandbox.places import Places
from genesis.sandbox.sockets import NAME_SERVICES

PLACES = Places("/p", "/p", "/root", None, (), ("/p/.git/genesis",), "/p/.git/genesis/heartbeats")
ALL = Machine("/usr/bin/bwrap", "", 7, None)
NO_BWRAP = Machine(None, "bubblewrap not installed: apt-get install bubblewrap", 7, None)
BARE = Machine(None, "bubblewrap not installed: apt-get install bubblewrap", 0, None)
MAC = Machine(None, "not Linux", 0, "/usr/bin/sandbox-exec")


@pytest.mark.parametrize("machine, kind", [(ALL, "bubblewrap"), (NO_BWRAP, "landlock"), (MAC, "seatbelt"),
                                           (BARE, "none")])
def test_auto_takes_the_best_box_the_machine_runs(machine, kind):
    assert choose("auto", machine, PLACES).kind == kind


def test_the_start_up_lines_say_what_is_protected_and_what_is_lost():
    assert choose("auto", ALL, PLACES).line() == (
        "sandbox: bubblewrap: the agent cannot write Genesis's state or code, cannot see or signal the loop, has a "
        "private /tmp; HOME is private (its CLI's folder, the language caches and GENESIS_BOX_ALLOW kept), no socket "
        "under /run or /run/user, no secret variable; the network is the host's (loopback services included)")
    none = choose("auto", BARE, PLACES).line()
    assert none.startswith("sandbox: none (bubblewrap not installed: apt-get install bubblewrap); the agent can "
                           "edit Genesis's state")
    assert "fails closed" in none
    assert choose("off", ALL, PLACES).line().startswith("sandbox: off (GENESIS_SANDBOX=off): the agent can edit")
    landlock = choose("landlock", ALL, PLACES).line()
    assert "cannot signal the loop" in landlock and "CAN edit Genesis's state" in landlock
    old = choose("landlock", Machine(None, "x", 3, None), PLACES).line()
    assert "CAN signal the loop (Landlock ABI 3 < 6)" in old


@pytest.mark.parametrize("setting, machine, said", [
    ("bwrap", NO_BWRAP, "apt-get install bubblewrap"),
    ("landlock", BARE, "Landlock needs Linux 5.13"),
    ("seatbelt", ALL, "comes with macOS"),
])
def test_a_named_box_that_cannot_run_is_refused_with_how_to_get_it(setting, machine, said):
    with pytest.raises(Unavailable, match=said) as caught:
        choose(setting, machine, PLACES)
    assert "GENESIS_SANDBOX=off" in str(caught.value)


def test_only_bubblewrap_renumbers_pids_and_only_it_and_seatbelt_wrap_the_command():
    assert choose("auto", ALL, PLACES).pid_namespace
    assert not choose("auto", NO_BWRAP, PLACES).pid_namespace
    assert choose("auto", NO_BWRAP, PLACES).wrap(("a",)) == ("a",)
    assert choose("auto", MAC, PLACES).wrap(("a",))[:2] == ("/usr/bin/sandbox-exec", "-p")
    assert choose("auto", ALL, PLACES).wrap(("a",))[0] == "/usr/bin/bwrap"


ROOT = Machine("/usr/bin/bwrap", "", 7, None, root=True)
ROOT_KEEPS_CAPS = Machine("/usr/bin/bwrap", "", 7, None, root=True,
                          root_why="a trial box failed: bwrap: No permissions to create new namespace")


@pytest.mark.parametrize("setting", ["auto", "bwrap"])
def test_as_root_the_box_runs_in_its_own_user_namespace_without_capabilities(setting):
    box = choose(setting, ROOT, PLACES)
    argv = " ".join(box.wrap(("claude",)))
    assert "--unshare-user --cap-drop ALL" in argv and argv.index("--cap-drop ALL") < argv.index("-- claude")
    assert "has a private /tmp; as root, without capabilities; " in box.line() and not box.weak
    assert "--cap-drop" not in " ".join(choose(setting, ALL, PLACES).wrap(("claude",)))


@pytest.mark.parametrize("setting", ["auto", "bwrap"])
def test_as_root_a_box_that_cannot_drop_capabilities_says_it_is_weaker_and_claims_nothing(setting):
    box = choose(setting, ROOT_KEEPS_CAPS, PLACES)
    line = box.line()
    assert line.startswith("sandbox: bubblewrap, a weaker box: Genesis runs as root and the box cannot take root's "
                           "capabilities away (a trial box failed: bwrap: No permissions to create new namespace), "
                           "so the agent CAN unmount its read-only folders and write Genesis's state and code")
    assert "cannot write Genesis's state" not in line
    assert box.record()["weak"].startswith("a trial box failed")
    assert "--cap-drop" not in " ".join(box.wrap(("claude",)))  # it would not run: said, not pretended


@pytest.mark.parametrize("setting, machine, open_", [
    ("auto", NO_BWRAP, "it CAN read all of HOME (~/.ssh, ~/.aws, ~/.config/gh) and the network"),
    ("auto", BARE, "it CAN read and write all of HOME (~/.ssh, ~/.aws, ~/.config/gh), reach every socket"),
    ("off", ALL, "every secret variable and the network is the host's"),
    ("auto", MAC, "HOME is unreadable (but its CLI's folder"),
])
def test_a_weaker_box_says_what_of_the_users_it_leaves_open(setting, machine, open_):
    box = choose(setting, machine, PLACES)
    assert open_ in box.line() and box.line().endswith(box.reach())
    assert box.record()["reach"] == box.reach()


def test_every_box_but_off_drops_the_secrets_and_keeps_the_clis_own_key():
    env = {"PATH": "/usr/bin", "ANTHROPIC_API_KEY": "sk-ant-api03-abcdefgh", "OPENAI_API_KEY": "sk-other-12345678",
           "GITHUB_TOKEN": "ghp_abcdefgh1234", "AWS_PROFILE": "prod", "SSH_AUTH_SOCK": "/run/user/1/ssh",
           "DB_PASSWORD": "x", "DATABASE_URL": "postgres://u:pw@db/x", "NOTE": "ghp_abcdefgh1234",
           "GENESIS_COMMIT_KEY": "k", "GIT_AUTHOR_NAME": "A", "PWD": "/p", "ANTHROPIC_AUTH_TOKEN": "t"}
    for machine in (ALL, NO_BWRAP, BARE):
        kept, dropped = choose("auto", machine, PLACES).environment(env, ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"))
        assert sorted(kept) == ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "GENESIS_COMMIT_KEY", "GIT_AUTHOR_NAME",
                                "PATH", "PWD"]
        assert dropped == ("AWS_PROFILE", "DATABASE_URL", "DB_PASSWORD", "GITHUB_TOKEN", "NOTE", "OPENAI_API_KEY",
                           "SSH_AUTH_SOCK")
    assert choose("off", ALL, PLACES).environment(env, ()) == (env, ())


def test_no_network_is_refused_where_the_box_cannot_take_it_away_and_said_where_it_can():
    for setting, machine in (("auto", NO_BWRAP), ("auto", BARE), ("off", ALL)):
        with pytest.raises(Unavailable, match="GENESIS_NETWORK=none needs bubblewrap .* or set GENESIS_NETWORK=open"):
            choose(setting, machine, PLACES, "none")
    boxed = choose("auto", ALL, PLACES, "none")
    assert "--unshare-net" in boxed.wrap(("a",)) and "--unshare-net" not in choose("auto", ALL, PLACES).wrap(("a",))
    assert boxed.line().endswith("no network (GENESIS_NETWORK=none): a loopback of its own, no abstract socket outside")
    mac = choose("auto", MAC, PLACES, "none")
    assert "(deny network-outbound (remote ip))" in mac.wrap(("a",))[2]
    assert "no network but the loopback" in mac.line()


@pytest.mark.fault(203)
def test_the_start_line_names_genesiss_code_a_box_leaves_writable():
    code = ("/root/.pyenv/versions/3.11.7", "/opt/genesis/.venv", "/tmp/genesis/genesis")
    places = Places("/p", "/p", "/root", None, (), ("/p/.git/genesis",), "/p/.git/genesis/heartbeats", code=code)
    landlock = choose("landlock", NO_BWRAP, places)
    assert landlock.code_open() == ("/root/.pyenv/versions/3.11.7", "/tmp/genesis/genesis")  # beneath HOME, /tmp
    line = landlock.line()
    assert "it CAN write Genesis's code at /root/.pyenv/versions/3.11.7, /tmp/genesis/genesis" in line
    assert "/opt/genesis/.venv" not in line and "install bubblewrap" in line
    assert landlock.record()["code_open"] == list(landlock.code_open())
    safe = choose("landlock", NO_BWRAP, Places("/p", "/p", "/root", None, (), (), "/b", code=("/opt/g/.venv",)))
    assert safe.code_open() == () and "Genesis's code is out of its write reach" in safe.line()
    bwrap = choose("bwrap", ALL, places)
    assert bwrap.code_open() == () and "CAN write Genesis's code" not in bwrap.line()
    held = Places("/h/p", "/h/p", "/h", None, (), (), "/b", code=("/opt/g",), code_open=("/h",))
    assert "it CAN write Genesis's code at /h," in choose("bwrap", ALL, held).line()


def landlock_machine(abi: int, arch: str = "x86_64") -> Machine:
    return Machine(None, "bubblewrap not installed", abi, None, arch=arch)


@pytest.mark.fault(206)
def test_landlock_keeps_a_tmux_or_screen_server_out_of_reach_and_says_how():
    """The user's tmux server (the README runs the loop in tmux) runs what it is sent outside the
    box: from Landlock ABI 9 no socket file made outside is reached, below it a seccomp filter
    opens no unix stream socket at all, and the start says which, with its cost."""
    nine = choose("landlock", landlock_machine(9), PLACES)
    assert nine.rules.sockets_scoped and nine.unix_filter is None and not nine.record()["socket_filter"]
    assert ("no socket file outside the box but the name services' and GENESIS_BOX_ALLOW's (Landlock ABI 9)"
            in nine.line())
    assert "tmux" not in nine.line() and "seccomp" not in nine.line()
    for arch in ("x86_64", "aarch64"):
        below = choose("landlock", landlock_machine(7, arch), PLACES)
        assert below.unix_filter is not None and below.unix_filter.arch == arch and below.record()["socket_filter"]
        line = below.line()
        assert ("no unix stream socket can be opened in the box (a seccomp filter), so no server's socket outside "
                "it is reached (ssh-agent, /run/user, docker, a tmux or screen server's): a program that needs one "
                "(a local database's socket, Python 3.14's multiprocessing forkserver) fails; bubblewrap or a kernel "
                "with Landlock ABI 9 keeps only the outside's sockets away") in line
        assert "reach every socket" not in line
    other = choose("landlock", landlock_machine(7, "riscv64"), PLACES)
    assert other.unix_filter is None
    assert ("reach every socket (ssh-agent, /run/user, docker, a tmux or screen server's, which runs any command it "
            "is sent outside the box: below Landlock ABI 9 only a seccomp filter keeps them away, and Genesis has "
            "none for this machine (riscv64))") in other.line()
    assert "tmux" not in choose("bwrap", ALL, PLACES).line()  # the private /tmp and /run/user: none reachable


def test_under_landlock_a_socket_given_back_is_reachable_and_below_abi_9_no_filter_runs(tmp_path):
    given, folder = tmp_path / "db.sock", tmp_path / "tool"
    folder.mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(given))
    try:
        places = replace(PLACES, allow=(Allowed(str(folder), False), Allowed(str(given), True)))
        nine = choose("landlock", landlock_machine(9), places)
        assert nine.unix_filter is None and set(nine.rules.reachable) <= {*NAME_SERVICES, str(folder), str(given)}
        assert {str(folder), str(given)} <= set(nine.rules.reachable)
        below = choose("landlock", landlock_machine(7), places)
        assert below.unix_filter is None  # the user's word wins: a filter would refuse their socket too
        assert (f"reach every socket (ssh-agent, /run/user, docker, a tmux or screen server's, which runs any command "
                f"it is sent outside the box: GENESIS_BOX_ALLOW gives {given}, and below Landlock ABI 9 only a filter "
                f"refusing every unix stream socket could keep the others away)") in below.line()
        folder_only = choose("landlock", landlock_machine(7), replace(PLACES, allow=(Allowed(str(folder), True),)))
        assert folder_only.unix_filter is not None  # a folder given back names no socket
    finally:
        server.close()


def test_the_allow_list_is_bubblewraps_and_a_weaker_box_says_it_leaves_the_hosts_network():
    allowed = Allowlist.of(parse_entries("api.anthropic.com, 127.0.0.1:4010"))
    boxed = choose("auto", ALL, PLACES, "allowlist", allowed)
    assert (boxed.network, boxed.allowed) == ("allowlist", allowed)
    assert boxed.line().endswith("a network of its own: its own loopback, and out only through Genesis's proxy to the "
                                 "allowed hosts (the host's loopback services and every other host refused, each "
                                 "refusal recorded) (allowed: api.anthropic.com, 127.0.0.1:4010; GENESIS_NETWORK_ALLOW "
                                 "adds hosts)")
    # Without its proxy running (a probe, a doctor's look), the box has no way out at all.
    argv = boxed.wrap(("claude",))
    assert "--unshare-net" in argv and "bridge.py" not in " ".join(argv)
    env, _ = boxed.environment({"PATH": "/usr/bin", "HTTPS_PROXY": "http://corp:3128"}, ())
    assert env["HTTPS_PROXY"] == env["https_proxy"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    assert boxed.record()["allowed"] == ["api.anthropic.com", "127.0.0.1:4010"]
    # A base URL on the proxy's own port (a local gateway on 3128): the proxy takes the next one.
    gateway = choose("auto", ALL, PLACES, "allowlist", Allowlist.of(parse_entries("127.0.0.1:3128")))
    assert gateway.environment({"PATH": "/usr/bin"}, ())[0]["HTTPS_PROXY"] == "http://127.0.0.1:3129"
    for setting, machine in (("auto", NO_BWRAP), ("auto", BARE), ("off", ALL)):
        weaker = choose(setting, machine, PLACES, "allowlist", allowed)
        assert (weaker.network, weaker.network_wanted) == ("open", "allowlist")
        assert weaker.line().endswith("the network is the host's (loopback services included): "
                                      "GENESIS_NETWORK=allowlist needs bubblewrap or Seatbelt, this box cannot "
                                      "filter it")
        assert "HTTPS_PROXY" not in weaker.environment({"PATH": "/usr/bin"}, ())[0]


def test_seatbelts_allow_list_lets_the_box_out_only_to_its_proxys_port_and_the_allowed_loopback_ports():
    allowed = Allowlist.of(parse_entries("api.anthropic.com, 127.0.0.1:4010"))
    mac = choose("auto", MAC, PLACES, "allowlist", allowed)
    assert (mac.kind, mac.network, mac.network_wanted, mac.allowed) == ("seatbelt", "allowlist", "", allowed)
    assert mac.line().endswith("no secret variable; it CAN reach sockets outside HOME (/tmp, /var/run) and out only "
                               "through Genesis's proxy to the allowed hosts (every other host refused and recorded by "
                               "the proxy; a direct connection refused by Seatbelt, unrecorded); the host's loopback "
                               "shared: the box can listen there but reach only the proxy's port and the allowed "
                               "ports, and any local process can reach the proxy's port (allowed: api.anthropic.com, "
                               "127.0.0.1:4010; GENESIS_NETWORK_ALLOW adds hosts)")
    assert mac.record()["network"] == "allowlist" and mac.record()["reach"] == mac.reach()
    # Without its proxy running (a probe, a doctor's look): no IP way out, and no variable naming one.
    shut = mac.wrap(("claude",))
    assert shut[:2] == ("/usr/bin/sandbox-exec", "-p") and shut[3:] == ("claude",)
    assert "(deny network-outbound (remote ip))" in shut[2] and "localhost:" not in shut[2]
    env, _ = mac.environment({"PATH": "/usr/bin", "HTTPS_PROXY": "http://corp:3128"}, ())
    assert not any(name.lower().endswith("_proxy") for name in env)
    # Its proxy running on a port of 127.0.0.1: that port and the base URL's, nothing else of the loopback.
    served = replace(mac, proxy_port=50123)
    text = served.wrap(("claude",))[2]
    assert ('(allow network-outbound (remote ip "localhost:4010"))\n'
            '(allow network-outbound (remote ip "localhost:50123"))') in text
    assert text.count("(remote ip \"localhost:") == 2
    env, _ = served.environment({"PATH": "/usr/bin"}, ())
    assert env["HTTPS_PROXY"] == env["http_proxy"] == env["ALL_PROXY"] == "http://127.0.0.1:50123"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1"  # the base URL on the loopback goes direct, allowed by port
