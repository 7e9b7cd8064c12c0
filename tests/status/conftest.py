"""Fixtures of the status tests."""

from __future__ import annotations

import time

import pytest

@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC and the screen wide, so the clock times and lines shown are known."""
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("COLUMNS", "250")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
