"""The dashboard's writes and the alerts' links, attacked: a browser without the write key, a
page without its CSRF token, a form posted from another site, a forged, replayed, expired or
foreign-run link: each refused, and nothing done (the stop flag untouched). The right ones act,
once, and the ledger says from where and with which credential."""

from __future__ import annotations

import os
import time
import warnings

import pytest
from helpers.dashboard import loop_mid_phase

from genesis.actions import links
from genesis.actions.control import fingerprint
from genesis.config import default_layout, resolve
from genesis.ledger.store import Ledger
from genesis.web.app import Settings, guarded
from genesis.web.discovery import key_of
from genesis.web.security import csrf_of, key_cookie

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

PORT = 8765
LOCAL = f"http://127.0.0.1:{PORT}"
KEY = "k" * 43
SIGNING = b"s" * 43
RUN = "run-1"


@pytest.fixture
def running(project, tmp_path):
    """A loop running on the project (its lock held), and the dashboard's settings with actions on."""
    fd = loop_mid_phase(project, RUN, time.time())
    control = tmp_path / "control"
    control.mkdir(mode=0o700)
    yield project, Settings(port=PORT, projects=(project,), scan_machine=False, act_key=KEY, link_key=SIGNING,
                            control=control)
    os.close(fd)


def stop_flag(project) -> str:
    flag = resolve(project).stop_flag
    return flag.read_text() if flag.exists() else ""


def actions(project) -> list[dict]:
    lay = default_layout(project)
    if not lay.ledger_file.exists():
        return []
    with Ledger.open(lay.ledger_file, readonly=True) as led:
        return led.events(kinds=("action",))


def client(settings: Settings) -> TestClient:
    return TestClient(guarded(settings), base_url=LOCAL, follow_redirects=False)


def post(c: TestClient, key: str, headers: dict, body: object | None = None, **kw):
    return c.post("/api/act", json={"key": key, "action": "stop"} if body is None else body, headers=headers, **kw)


def test_the_key_link_sets_a_strict_httponly_cookie_and_a_wrong_key_is_refused(running):
    _, settings = running
    with client(settings) as c:
        assert c.get("/?key=nope").status_code == 401
        r = c.get("/?key=" + KEY)
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"].lower()
        assert f"{key_cookie(PORT)}=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
        assert c.get("/api/csrf").json() == {"csrf": csrf_of(KEY), "actions": True}
    with client(settings) as stranger:
        assert stranger.get("/api/csrf").json() == {"csrf": "", "actions": False}
        assert stranger.get("/api/state").status_code == 200     # reading needs nothing more than before


def test_writes_without_the_key_the_token_or_this_origin_are_refused_and_do_nothing(running):
    project, settings = running
    key = key_of(project)
    good = {"X-Genesis-CSRF": csrf_of(KEY)}
    with client(settings) as c:
        r = post(c, key, good)
        assert r.status_code == 403 and "no write key" in r.json()["error"]
        c.cookies.set(key_cookie(PORT), KEY)
        r = post(c, key, {})
        assert r.status_code == 403 and "CSRF" in r.json()["error"]
        r = post(c, key, {"X-Genesis-CSRF": "0" * 64})
        assert r.status_code == 403 and "CSRF" in r.json()["error"]
        # A cross-site form post: another site's Origin, a form's body, no CSRF header (a form cannot set one).
        r = c.post("/api/act", data={"key": key, "action": "stop"},
                   headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403 and "another site" in r.json()["error"]
        r = post(c, key, {**good, "Origin": "https://evil.example"})
        assert r.status_code == 403 and "another site" in r.json()["error"]
        r = post(c, key, {**good, "Sec-Fetch-Site": "same-site"})
        assert r.status_code == 403
        assert c.put("/api/act", json={}).status_code == 405
        assert stop_flag(project) == "" and actions(project) == []
        r = post(c, key, {**good, "Origin": LOCAL, "Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 200, r.text
        assert "stops after the current phase" in r.json()["said"]
    assert stop_flag(project) == "false\n"
    [done] = actions(project)
    assert (done["action"], done["source"], done["credential"]) == ("stop", "dashboard",
                                                                    f"dashboard key {fingerprint(KEY)}")


def test_an_action_that_does_not_apply_says_why_and_an_unknown_loop_is_404(running):
    project, settings = running
    with client(settings) as c:
        c.cookies.set(key_cookie(PORT), KEY)
        headers = {"X-Genesis-CSRF": csrf_of(KEY)}
        r = post(c, key_of(project), headers, {"key": key_of(project), "action": "pause"})
        assert r.status_code == 409 and "no fleet ran" in r.json()["error"] and r.json()["code"] == 38
        assert post(c, "p-000000000000", headers).status_code == 404


def link(action: str, project, now: float, run: str = RUN, key: bytes = SIGNING, lifetime: float = 600) -> str:
    return links.sign(key, action, str(project), run, "", now, lifetime)


def test_a_link_acts_once_and_a_replay_does_nothing(running):
    project, settings = running
    token = link("stop", project, time.time())
    with client(settings) as c:
        page = c.get(f"/act/{token}")
        assert page.status_code == 200 and "Stop after the phase" in page.text
        assert stop_flag(project) == ""                              # a look spends nothing
        r = c.post(f"/act/{token}")
        assert r.status_code == 200 and r.text.startswith("done: wrote false to the stop flag")
        (resolve(project).stop_flag).write_text("true\n")
        again = c.post(f"/act/{token}")
        assert again.status_code == 410 and "used already" in again.text
        assert "used already" in c.get(f"/act/{token}").text
    assert stop_flag(project) == "true\n"                        # the replay did nothing
    assert [a["source"] for a in actions(project)] == ["alert"]


def test_forged_expired_and_foreign_run_links_are_refused_and_do_nothing(running):
    project, settings = running
    now = time.time()
    good = link("stop", project, now)
    payload, _, mac = good.partition(".")
    forged_payload = link("stop-now", project, now).partition(".")[0] + "." + mac
    cases = {
        "another key": (link("stop-now", project, now, key=b"x" * 43), 403, "not one Genesis signed"),
        "a changed payload": (forged_payload, 403, "not one Genesis signed"),
        "no signature": (payload, 403, "not one Genesis signed"),
        "expired": (link("stop", project, now - 700), 410, "expired"),
        "another run": (link("stop", project, now, run="run-0"), 409, "has ended; another runs now"),
    }
    with client(settings) as c:
        for name, (token, status, words) in cases.items():
            r = c.post(f"/act/{token}")
            assert (r.status_code, words in r.text) == (status, True), name
    assert stop_flag(project) == "" and [a for a in actions(project)] == []


def test_without_its_keys_the_dashboard_only_reads(project):
    with client(Settings(port=PORT, projects=(project,), scan_machine=False)) as c:
        assert c.get("/api/state").status_code == 200
        assert c.post("/api/act", json={}).status_code == 403
        assert c.get("/act/anything").status_code == 404
