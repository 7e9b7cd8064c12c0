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
