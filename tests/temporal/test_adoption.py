"""A retry adopts only the loop launched for its own attempt, never one being stopped."""

from __future__ import annotations

import os
import subprocess
import sys

from genesis.temporal import adoption


def test_the_loop_launched_for_this_attempt_is_adopted(tmp_path):
    adoption.record_launch(tmp_path, "t-abc123", 4242, "f/t", 2)
    assert adoption.refusal(adoption.read_launch(tmp_path, "t-abc123"), 4242, "f/t", 2) == ""


def test_a_loop_being_stopped_is_never_adopted(tmp_path):
    adoption.record_launch(tmp_path, "t-abc123", 4242, "f/t", 2)
    adoption.mark_stopping(tmp_path, "t-abc123", 4242)
    assert "stopping" in adoption.refusal(adoption.read_launch(tmp_path, "t-abc123"), 4242, "f/t", 2)


def test_stopping_another_launch_leaves_the_record_as_it_is(tmp_path):
    adoption.record_launch(tmp_path, "t-abc123", 4242, "f/t", 2)
    adoption.mark_stopping(tmp_path, "t-abc123", 999)
    assert adoption.refusal(adoption.read_launch(tmp_path, "t-abc123"), 4242, "f/t", 2) == ""


def test_an_earlier_attempts_or_another_workflows_loop_is_not_adopted(tmp_path):
    adoption.record_launch(tmp_path, "t-abc123", 4242, "f/t", 1)
    record = adoption.read_launch(tmp_path, "t-abc123")
    assert "attempt 1" in adoption.refusal(record, 4242, "f/t", 2)
    assert "attempt 1" in adoption.refusal(record, 4242, "g/t", 1)


def test_an_unrecorded_or_other_session_is_not_adopted(tmp_path):
    assert "no launch" in adoption.refusal(None, 4242, "f/t", 1)
    adoption.record_launch(tmp_path, "t-abc123", 4242, "f/t", 1)
    record = adoption.read_launch(tmp_path, "t-abc123")
    assert "not the loop" in adoption.refusal(record, 5353, "f/t", 1)
    assert "not the loop" in adoption.refusal(record, 0, "f/t", 1)


def test_a_corrupt_record_reads_as_none(tmp_path):
    path = adoption.launch_file(tmp_path, "t-abc123")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert adoption.read_launch(tmp_path, "t-abc123") is None


def test_a_launched_process_leads_its_session_and_its_children_share_it():
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess,sys,time; "
                             "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                             "print(p.pid, flush=True); time.sleep(30)"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        grandchild = int(proc.stdout.readline())
        assert adoption.session_of(proc.pid) == proc.pid
        assert adoption.session_of(grandchild) == proc.pid
        assert adoption.session_of(os.getpid()) != proc.pid
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
