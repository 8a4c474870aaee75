"""Writes of a run folder that a kill -9 cannot break: the JSON-lines log with a torn last line,
the lock's side file, and removing a run folder only under its lock."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from pcmr.train.lifecycle import remove_run
from pcmr.train.lock import LOCK_FILE, LOCK_FILES, RunLock, RunLockedError
from pcmr.train.loggers import JsonlLog, read_jsonl
from pcmr.train.state import TrainingProgress


def _torn_log(path):
    whole = json.dumps({"event": "step", "global_step": 1}) + "\n"
    path.write_bytes((whole + json.dumps({"event": "step", "global_step": 2})[:17]).encode())


def test_a_torn_last_line_is_dropped_on_read(tmp_path):
    log = tmp_path / "log.jsonl"
    _torn_log(log)
    assert read_jsonl(log) == [{"event": "step", "global_step": 1}]


def test_a_log_reopened_after_a_kill_appends_readable_lines(tmp_path):
    log = tmp_path / "log.jsonl"
    _torn_log(log)
    writer = JsonlLog(log)
    writer.write("resume", global_step=1)
    writer.close()
    events = read_jsonl(log)
    assert [e["event"] for e in events] == ["step", "resume"] and events[1]["global_step"] == 1


def test_a_broken_line_in_the_middle_names_the_file_and_line(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"event": "start"}\n{"event": \n{"event": "step"}\n')
    with pytest.raises(ValueError, match=r"log\.jsonl, line 2: not a JSON object"):
        read_jsonl(log)


def test_a_released_lock_leaves_no_side_file(tmp_path):
    with RunLock(tmp_path):
        assert (tmp_path / LOCK_FILE).is_file()
    assert not any((tmp_path / name).exists() for name in LOCK_FILES)
    with RunLock(tmp_path):  # and it can be taken again
        pass
    assert list(tmp_path.iterdir()) == []


def test_remove_run_is_refused_while_a_live_process_holds_the_lock(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("x: 1\n")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = {"pid": sleeper.pid, "host": socket.gethostname(), "start_time": None}
        (run / LOCK_FILE).write_text(json.dumps(owner) + "\n")
        with pytest.raises(RunLockedError, match="in use by process"):
            remove_run(run)
        assert (run / "config.yaml").is_file()
    finally:
        sleeper.kill()
        sleeper.wait()
    with pytest.warns(UserWarning, match="taking over the stale lock"):
        remove_run(run)  # its owner is gone: the stale lock is taken over, then the folder removed
    assert not run.exists()


def test_training_progress_round_trips_and_names_an_unknown_key():
    progress = TrainingProgress(epoch=2, global_step=7, best_metric=1.5, best_epoch=2,
                                history=[{"epoch": 1}], epoch_totals={"loss": 3.0})
    assert TrainingProgress.from_dict(json.loads(json.dumps(progress.to_dict()))) == progress
    with pytest.raises(ValueError, match="unknown key 'epochs'.*expected one of: epoch, step_in_epoch"):
        TrainingProgress.from_dict({"epochs": 1})
