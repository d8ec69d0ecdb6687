"""The launcher's process handling, on a stand-in process tree (no Flower needed)."""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time

import pytest

from devtools.launch import stop_local_superlink
from devtools.processes import superlink_tree
from pfedgm_app.paper import flwr_cli as launch
from pfedgm_app.paper.flwr_cli import run_config_arg


@pytest.mark.slow  # real processes and waits
def test_stop_local_superlink_kills_the_whole_tree(tmp_path):
    """A 'flower-superlink' naming this FLWR_HOME and its child both go; others are untouched."""
    home = tmp_path / "flwr-home"
    script = f"sleep 300 & wait  # flower-superlink --database {home}/local-superlink/state.db"
    root = subprocess.Popen(["bash", "-c", script])
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        for _ in range(50):
            tree = superlink_tree(home)
            if len(tree) >= 2:
                break
            time.sleep(0.1)
        assert root.pid in tree and len(tree) >= 2 and bystander.pid not in tree
        assert stop_local_superlink(home) == len(tree)
        root.wait(timeout=10)
        assert superlink_tree(home) == set() and bystander.poll() is None
    finally:
        for proc in (root, bystander):
            proc.kill()


def test_run_config_arg_quotes_strings():
    assert run_config_arg({"method": "fedavg", "lambda": 1.0, "seed": 3}) == (
        "method='fedavg' lambda=1.0 seed=3"
    )


class FakeFlwr:
    """Stands in for the `flwr` CLI: `list` answers `status()`, every call is recorded."""

    def __init__(self, status):
        self.status, self.calls = status, []

    def __call__(self, args, env, check=True):
        self.calls.append((time.time(), args[0]))
        runs = [{"status": self.status()}]
        return subprocess.CompletedProcess(args, 0, stdout=json.dumps({"runs": runs}))


@pytest.mark.slow  # real processes and waits
def test_wait_asks_flwr_list_once_when_the_log_stream_ends(tmp_path, monkeypatch):
    """The SuperLink ends a run's log stream when the run is finished: the wait asks `flwr list`
    then, once, and not before."""
    started = time.time()
    fake = FakeFlwr(lambda: "finished:failed" if time.time() > started + 1.5 else "running")
    monkeypatch.setattr(launch, "flwr", fake)
    monkeypatch.setattr(launch, "_follow", lambda *_: subprocess.Popen(["sleep", "1.5"]))
    assert launch._wait("1", {}, started + 60, [], tmp_path) == "finished:failed"
    asked = [t - started for t, cmd in fake.calls]
    assert len(asked) == 1 and 1.5 <= asked[0] < 3, asked


@pytest.mark.slow  # real processes and waits
def test_wait_polls_when_the_stream_ends_before_the_run(tmp_path, monkeypatch):
    """A stream that drops (here: at once) leaves the wait to `flwr list`, which finds the run
    still going and asks again until it is finished."""
    started = time.time()
    fake = FakeFlwr(lambda: "finished:completed" if time.time() > started + 1.2 else "running")
    monkeypatch.setattr(launch, "flwr", fake)
    monkeypatch.setattr(launch, "_follow", lambda *_: subprocess.Popen(["true"]))
    assert launch._wait("1", {}, started + 60, [], tmp_path) == "finished:completed"
    assert len([cmd for _, cmd in fake.calls if cmd == "list"]) >= 2


@pytest.mark.slow  # real processes and waits
def test_wait_stops_a_run_still_going_at_the_deadline_and_its_stream(tmp_path, monkeypatch):
    fake = FakeFlwr(lambda: "running")
    monkeypatch.setattr(launch, "flwr", fake)
    stream = subprocess.Popen(["sleep", "300"])
    monkeypatch.setattr(launch, "_follow", lambda *_: stream)
    started = time.time()
    assert launch._wait("1", {}, started + 1.5, [], tmp_path) == "timeout (running)"
    assert [cmd for _, cmd in fake.calls] == ["list", "stop"]
    assert stream.poll() is not None  # killed, not left behind


@pytest.mark.slow  # real processes and waits
def test_poll_asks_flwr_list_only_when_the_run_stops_writing(tmp_path, monkeypatch):
    """A run that writes a row every 0.3 s for 4 s is not asked about meanwhile (each `flwr
    list` is a process that takes CPU from the run measured); its summary ends the wait."""
    done = threading.Event()
    fake = FakeFlwr(lambda: "finished:completed" if done.is_set() else "running")
    monkeypatch.setattr(launch, "flwr", fake)

    def run():
        for i in range(13):
            (tmp_path / "rounds.jsonl").write_text("{}\n" * (i + 1))
            time.sleep(0.3)
        (tmp_path / "summary.json").write_text("{}")
        done.set()

    writer = threading.Thread(target=run)
    started = time.time()
    writer.start()
    status = launch._poll("1", {}, started + 60, [], tmp_path)
    writer.join()
    assert status == "finished:completed"
    asked = [t - started for t, cmd in fake.calls if cmd == "list"]
    assert len(asked) <= 3 and all(t < 0.5 or t > 3.9 for t in asked), asked


@pytest.mark.slow  # real processes and waits
def test_poll_asks_a_silent_run_at_growing_intervals_and_stops_it_at_the_deadline(
    tmp_path, monkeypatch
):
    fake = FakeFlwr(lambda: "running")
    monkeypatch.setattr(launch, "flwr", fake)
    started = time.time()
    assert launch._poll("1", {}, started + 5, [], tmp_path) == "timeout (running)"
    asked = [t - started for t, cmd in fake.calls if cmd == "list"]
    gaps = [b - a for a, b in itertools.pairwise(asked)]
    assert 3 <= len(asked) <= 6 and 0.9 < gaps[0] < gaps[1], asked  # 0, 1, 2.5, then ~5
    assert fake.calls[-1][1] == "stop"
