"""An attempt's evidence: its transcript's last lines, bounded in lines and bytes, safe for a
terminal, free of secrets, and never read through what an agent planted at the log's path."""

from __future__ import annotations

import os
import threading

from genesis.redact import MARK
from genesis.watch.evidence import TAIL_BYTES, TAIL_LINES, WIDTH, transcript_tail

KEY = "sk-ant-api03-" + "Zq7" * 12


def test_the_newest_twenty_lines_oldest_first_without_blank_ones(tmp_path):
    log = tmp_path / "iter-0001-Builder.log"
    log.write_text("".join(f"line {n}\n\n" for n in range(1, 101)))
    assert transcript_tail(log) == [f"line {n}" for n in range(101 - TAIL_LINES, 101)]


def test_at_most_four_kilobytes_and_each_line_cut_to_its_width(tmp_path):
    log = tmp_path / "agent.log"
    log.write_text("".join(f"{n:03d} " + "é" * 400 + "\n" for n in range(30)))
    lines = transcript_tail(log)
    assert sum(len(line.encode()) + 1 for line in lines) <= TAIL_BYTES
    assert len(lines) == TAIL_BYTES // (len(lines[-1].encode()) + 1)  # as many whole lines as fit
    assert lines[-1].startswith("029 ") and len(lines[-1]) == WIDTH and lines[-1].endswith("\u2026")


def test_escape_sequences_and_controls_go_and_a_carriage_return_keeps_what_a_terminal_shows(tmp_path):
    log = tmp_path / "agent.log"
    log.write_text("\x1b]0;owned title\x07\x1b[31mred\x1b[0m text\n"
                   "progress 10%\rprogress 100%\n"
                   "bell\x07 and \x9b2J clear\n", encoding="utf-8")  # \x9b: a C1 CSI, as UTF-8 carries it
    assert transcript_tail(log) == ["red text", "progress 100%", "bell and  clear"]


def test_secrets_are_redacted_even_split_by_an_escape_or_across_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOP_DB_PASSWORD", "hunter2-but-longer")
    log = tmp_path / "agent.log"
    split = KEY[:20] + "\x1b[0m" + KEY[20:]
    log.write_text(f"found {KEY} in .env\nagain {split}\nthe password is hunter2-but-longer\n"
                   "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
                   "done\n")
    lines = transcript_tail(log)
    text = "\n".join(lines)
    assert "Zq7Zq7" not in text and "hunter2" not in text and "b3BlbnNzaC1rZXktdjEAAAAA" not in text, lines
    assert lines[0] == f"found {MARK} in .env" and lines[-1] == "done"
    assert f"again {MARK}" in lines and f"the password is {MARK}" in lines


def test_a_long_log_is_read_from_its_end_and_its_cut_first_line_left_out(tmp_path):
    log = tmp_path / "agent.log"
    log.write_text("A" * (1 << 20) + "\nthe last words\n")
    assert transcript_tail(log) == ["the last words"]


def test_nothing_for_a_missing_log_a_symlink_or_a_fifo_planted_at_its_path(tmp_path):
    assert transcript_tail(tmp_path / "gone.log") == []
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's private notes\n")
    link = tmp_path / "link.log"
    link.symlink_to(secret)
    assert transcript_tail(link) == []
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    got: list = []
    reader = threading.Thread(target=lambda: got.append(transcript_tail(fifo)), daemon=True)
    reader.start()
    reader.join(5.0)
    assert not reader.is_alive() and got == [[]]  # never blocks on a FIFO without a writer
