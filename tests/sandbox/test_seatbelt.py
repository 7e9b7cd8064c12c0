"""The Seatbelt profile (macOS): it cannot run here, so its text and argv are checked."""

from __future__ import annotations

from genesis.sandbox.places import Places
from genesis.sandbox.seatbelt import profile, seatbelt_argv


def test_the_profile_denies_writes_to_genesis_and_signals_outside(tmp_path):
    state = tmp_path / "p" / ".git" / "genesis"
    state.mkdir(parents=True)
    conf = tmp_path / "genesis.conf"
    conf.write_text("")
    places = Places(str(tmp_path / "p"), str(tmp_path / "p"), None, None, (), (str(state), str(conf), '/opt/a "b'),
                    str(state / "heartbeats"))
    text = profile(places)
    assert text.startswith("(version 1)\n(allow default)\n")
    assert f'(deny file-write* (subpath "{state}") (literal "{conf}") (literal "/opt/a \\"b"))' in text
    assert text.index("(deny file-write*") < text.index(f'(allow file-write* (subpath "{state}/heartbeats"))')
    assert "(deny signal)\n(allow signal (target same-sandbox))" in text
    argv = seatbelt_argv("/usr/bin/sandbox-exec", places, ("claude", "-p"))
    assert argv == ("/usr/bin/sandbox-exec", "-p", text, "claude", "-p")


def test_the_profile_denies_home_but_what_the_agent_keeps_and_the_user_allows(tmp_path):
    from genesis.sandbox.home import Allowed

    home, project = tmp_path / "home", tmp_path / "home" / "p"
    state = project / ".git" / "genesis"
    state.mkdir(parents=True)
    (home / ".claude").mkdir()
    (home / ".claude.json").write_text("{}")
    places = Places(str(project), str(project), str(home), None, (), (str(state),), str(state / "heartbeats"),
                    private_home=str(home),
                    home_kept=((str(project), True), (str(home / ".claude"), True), (str(home / ".claude.json"), True),
                               (str(home / ".local/bin"), False)),
                    home_hidden=(str(home / ".cargo/credentials.toml"),),
                    allow=(Allowed(str(home / ".kube"), False), Allowed("/var/run/docker.sock", True)))
    lines = profile(places).splitlines()
    deny_home = lines.index(f'(deny file-read* file-write* (subpath "{home}"))')
    kept = [lines.index(f'(allow file-read* file-write* (subpath "{project}"))'),
            lines.index(f'(allow file-read* file-write* (subpath "{home}/.claude"))'),
            lines.index(f'(allow file-read* file-write* (literal "{home}/.claude.json"))'),
            lines.index(f'(allow file-read* (literal "{home}/.local/bin"))')]
    hidden = lines.index(f'(deny file-read* file-write* (literal "{home}/.cargo/credentials.toml"))')
    allowed = [lines.index(f'(allow file-read* (literal "{home}/.kube"))'),
               lines.index('(allow file-read* file-write* (literal "/var/run/docker.sock"))'),
               lines.index('(allow network-outbound (remote unix-socket (path-literal "/var/run/docker.sock")))')]
    launchd = lines.index('(deny network-outbound (remote unix-socket (path-regex '
                          '#"^/private/tmp/com\\.apple\\.launchd\\.[^/]+/")))')
    # A later rule wins: HOME denied, then what is kept, then its credentials, then the user's; Genesis's state last.
    assert deny_home < min(kept) and max(kept) < hidden < launchd < min(allowed)
    assert max(allowed) < lines.index(f'(deny file-write* (subpath "{state}"))')
    assert f'(allow file-read-metadata (subpath "{home}"))' in lines


def test_without_a_private_home_the_profile_leaves_home_as_it_was(tmp_path):
    places = Places(str(tmp_path), str(tmp_path), str(tmp_path / "home"), None, (), (), str(tmp_path / "hb"))
    assert "(subpath \"" + str(tmp_path / "home") not in profile(places)


def test_the_allow_list_lets_ip_out_only_to_the_named_loopback_ports(tmp_path):
    places = Places(str(tmp_path), str(tmp_path), None, None, (), (), str(tmp_path / "beats"))
    lines = profile(places, network=False, out_ports=(4010, 50123, 4010)).splitlines()
    deny = lines.index("(deny network-outbound (remote ip))")
    assert lines[deny + 1:deny + 3] == ['(allow network-outbound (remote ip "localhost:4010"))',
                                       '(allow network-outbound (remote ip "localhost:50123"))']
    assert '"localhost:*"' not in "\n".join(lines)  # the host's other loopback services stay out of reach
    # The user's launchd sockets stay refused, and Genesis's files unwritable, as in every Seatbelt box.
    assert any("com\\.apple\\.launchd" in line for line in lines) and "(deny signal)" in lines
    shut = profile(places, network=False, out_ports=()).splitlines()  # no proxy running: no IP way out at all
    assert "(deny network-outbound (remote ip))" in shut and not any("remote ip \"" in line for line in shut)
    assert "remote ip" not in profile(places)  # open: the host's network, as before
