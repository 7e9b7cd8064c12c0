"""The agent in its box cannot act: with real bubblewrap, the dashboard's write key and the links'
signing key (in the user's shared state, under HOME) are not there to read, and the folders
where the loop and the monitor pick up requests cannot be written (Genesis's state is read-only
in the box): no credential, and no request planted."""

from __future__ import annotations

import pytest
from sandbox.test_private_home import MACHINE, boxed, inside, top, user_home  # noqa: F401 - top: the fixture

from genesis.actions.control import control_dir, dashboard_key, signing_key

pytestmark = pytest.mark.skipif(MACHINE.bwrap is None, reason=f"no bubblewrap here: {MACHINE.bwrap_why}")


def test_no_key_is_readable_and_no_request_can_be_planted_from_inside_the_box(top):
    tmp_path = top  # a HOME under /tmp, and one elsewhere (as a user's is)
    home = user_home(tmp_path)
    env = {"HOME": str(home)}
    folder = control_dir(env)
    key, signing = dashboard_key(folder), signing_key(folder).decode()
    assert folder.is_relative_to(home) and (folder / "dashboard.key").read_text().strip() == key
    box, kept, project = boxed(tmp_path, home, env)
    state = project / ".git" / "genesis"
    (state / "fleet" / "requests").mkdir(parents=True)
    (state / "requests").mkdir()
    (state / "ledger.sqlite3").write_text("")
    script = f"""
        for f in "{folder}/dashboard.key" "{folder}/links.key"; do
          if cat "$f" 2>/dev/null; then echo "READ $f"; fi
        done
        if ls "{folder}" 2>/dev/null; then echo "LISTED"; fi
        grep -rs "{key}" "$HOME" /tmp 2>/dev/null && echo FOUND
        for d in "{state}/requests" "{state}/fleet/requests"; do
          if echo '{{"action": "stop-now", "at": 1}}' > "$d/planted.json" 2>/dev/null; then echo "WROTE $d"; fi
        done
        test -f "{state}/ledger.sqlite3" && echo STATE_SEEN
        echo checked
    """
    done = inside(box, kept, project, script)
    assert done.stdout.strip().endswith("STATE_SEEN\nchecked"), (done.stdout, done.stderr)  # ran, in the box
    assert "READ" not in done.stdout and "LISTED" not in done.stdout and "FOUND" not in done.stdout
    assert key not in done.stdout and signing not in done.stdout
    assert "WROTE" not in done.stdout
    assert not list((state / "requests").iterdir()) and not list((state / "fleet" / "requests").iterdir())
