"""The machine-wide account store: its place, a private folder of ours, atomic bounded files,
and a store that is not ours (a symlink, another owner, a loose mode) refused, never used."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from genesis.store.accounts import MAX_BYTES, MAX_RECORDS, AccountStore, StoreUnusable, root_of

NOW = 1_800_000_000.0


def add(record: dict):
    return lambda records: records + [record]


def test_the_store_is_the_knob_else_xdg_state_home_else_the_home_state_folder(tmp_path):
    assert root_of("/srv/genesis-state", {"HOME": "/home/u"}) == Path("/srv/genesis-state")
    assert root_of("~/state", {"HOME": str(tmp_path)}) == Path(os.path.expanduser("~/state"))
    assert root_of("", {"HOME": "/home/u", "XDG_STATE_HOME": "/home/u/.st"}) == Path("/home/u/.st/genesis")
    # A relative XDG_STATE_HOME is invalid by the XDG spec: ignored.
    assert root_of("", {"HOME": "/home/u", "XDG_STATE_HOME": "st"}) == Path("/home/u/.local/state/genesis")
    assert root_of("", {"HOME": "/home/u"}) == Path("/home/u/.local/state/genesis")


def test_records_are_written_atomically_in_a_private_folder_and_read_back(tmp_path):
    store = AccountStore(tmp_path / "state" / "genesis")
    assert store.read("limits.json", "limits", 2, NOW) == ([], None)  # never made: nothing, no folder made
    assert not store.root.exists()
    assert store.update("limits.json", "limits", 2, NOW, add({"cli": "claude"})) is None
    for folder in (store.root, store.folder):
        assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    assert store.read("limits.json", "limits", 2, NOW) == ([{"cli": "claude"}], None)
    assert json.loads(store.path("limits.json").read_text()) == {"version": 2, "limits": [{"cli": "claude"}]}
    assert sorted(os.listdir(store.folder)) == ["limits.json", "lock"]  # no temp file left behind
    # Bounded: the oldest records go first; an empty list removes the file.
    store.update("limits.json", "limits", 2, NOW, lambda r: [{"n": n} for n in range(MAX_RECORDS + 5)])
    records, _ = store.read("limits.json", "limits", 2, NOW)
    assert len(records) == MAX_RECORDS and records[0] == {"n": 5}
    store.update("limits.json", "limits", 2, NOW, lambda r: [])
    assert not store.path("limits.json").exists()


@pytest.mark.parametrize("bad", ["{not json", '{"version": 1, "limits": []}', '{"version": 2, "limits": 7}', "big"])
def test_a_file_that_cannot_be_read_is_kept_aside_said_and_not_used(tmp_path, bad):
    store = AccountStore(tmp_path / "genesis")
    store.ensure()
    text = json.dumps({"version": 2, "limits": [{"pad": "x" * MAX_BYTES}]}) if bad == "big" else bad
    store.path("limits.json").write_text(text)
    records, warning = store.read("limits.json", "limits", 2, NOW)
    assert records == [] and "kept aside as limits.json.corrupt-" in warning and "it is not used" in warning
    assert not store.path("limits.json").exists()
    assert [p.read_text() for p in store.folder.glob("limits.json.corrupt-*")] == [text]
    # The next write starts a good file.
    store.update("limits.json", "limits", 2, NOW, add({"cli": "codex"}))
    assert store.read("limits.json", "limits", 2, NOW) == ([{"cli": "codex"}], None)


@pytest.mark.fault(95)
def test_a_symlinked_store_is_refused_and_nothing_is_read_or_written_through_it(tmp_path):
    elsewhere = AccountStore(tmp_path / "elsewhere")
    elsewhere.update("limits.json", "limits", 2, NOW, add({"cli": "claude", "planted": True}))
    before = elsewhere.path("limits.json").read_text()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "genesis").symlink_to(elsewhere.root)
    store = AccountStore(tmp_path / "state" / "genesis")
    records, warning = store.read("limits.json", "limits", 2, NOW)
    assert records == [] and "is not a plain folder (a symlink?)" in warning
    with pytest.raises(StoreUnusable, match="symlink"):
        store.update("limits.json", "limits", 2, NOW, add({"cli": "claude"}))
    with pytest.raises(StoreUnusable):
        store.ensure()
    assert elsewhere.path("limits.json").read_text() == before
    # The folder inside it, too.
    inner = AccountStore(tmp_path / "inner")
    inner.root.mkdir(mode=0o700)
    (inner.root / "accounts").symlink_to(elsewhere.folder)
    assert "is not a plain folder" in inner.read("limits.json", "limits", 2, NOW)[1]
    # And its lock file.
    own = AccountStore(tmp_path / "own")
    own.ensure()
    own.path("lock").symlink_to(tmp_path / "victim")
    with pytest.raises(StoreUnusable, match="lock"):
        own.update("limits.json", "limits", 2, NOW, add({}))
    assert not (tmp_path / "victim").exists()


def test_a_store_writable_by_others_is_refused(tmp_path):
    loose = AccountStore(tmp_path / "loose")
    loose.ensure()
    os.chmod(loose.folder, 0o777)
    assert "writable by others" in loose.read("limits.json", "limits", 2, NOW)[1]
    with pytest.raises(StoreUnusable, match="writable by others"):
        loose.update("limits.json", "limits", 2, NOW, add({}))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another owner needs root")
def test_a_store_of_another_owner_is_refused(tmp_path):
    theirs = AccountStore(tmp_path / "theirs")
    theirs.ensure()
    os.chown(theirs.root, 4242, 4242)
    assert "belongs to uid 4242" in theirs.read("limits.json", "limits", 2, NOW)[1]
    with pytest.raises(StoreUnusable, match="uid 4242"):
        theirs.update("limits.json", "limits", 2, NOW, add({}))
