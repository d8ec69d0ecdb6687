"""The in-process engine's worker processes end with the process that started them: a run
stopped (SIGTERM) or killed (SIGKILL) while its workers train leaves no worker behind, where
Python's pool alone lets each finish its message (a round of training, its memory held) for
no one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pfedgm_cli.processes import alive, argv, kill, process_tree

ROOT = Path(__file__).resolve().parents[1]


def _gone_within(pids: set[int], seconds: float) -> tuple[set[int], float]:
    """(the processes of `pids` still alive after up to `seconds`, the seconds waited)."""
    started = time.monotonic()
    while (left := {p for p in pids if alive(p)}) and time.monotonic() - started < seconds:
        time.sleep(0.05)
    return left, time.monotonic() - started


def _kill_left(recorded: dict[int, list[str]]) -> None:
    """Kill what a failure left of the processes `recorded` ({pid: its arguments}), each only
    while its PID still runs those arguments (a PID freed is soon another's)."""
    kill({pid for pid, args in recorded.items() if args and argv(pid) == args})


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_watching_process_ends_with_its_parent(sig):
    """A process that watches its parent (`workers.watch_parent`, what each worker starts
    with) exits once the parent ends, stopped or killed, though it was sleeping for a minute
    (within the 5 s waited here; how soon is a figure for benchmarks, not a test)."""
    child = (
        "import os, time; from pfedgm_engine.workers import watch_parent; "
        "watch_parent(os.getppid()); print(os.getpid(), flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(
        ["bash", "-c", f'{sys.executable} -c "{child}" & wait'],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    recorded = {}
    try:
        watcher = int(parent.stdout.readline())
        recorded = {watcher: argv(watcher)}
        assert alive(watcher)
        parent.send_signal(sig)
        parent.wait(timeout=10)
        left, _ = _gone_within({watcher}, 5)
    finally:
        parent.kill()
        _kill_left(recorded)
    assert left == set(), left


CHILD = """
import json, sys
from pfedgm_engine.inprocess import run_inprocess
run_inprocess(json.loads(sys.argv[1]), 4, workers=2)
"""


@pytest.mark.slow  # two runs
def test_a_stopped_or_killed_in_process_run_takes_its_workers_with_it(tmp_path, mnist):
    """Two tiny runs with two workers each (4 MNIST clients, 2 sampled a round), each round
    of training longer than the test: once round 1 is under way, one run is stopped
    (SIGTERM, as `kill PID` does), the other killed (SIGKILL); within 3 s no process either
    started (its two workers, the pool's resource tracker) is left."""
    cfg = {"num-server-rounds": 2, "local-epochs": 500, "pool-size": 1000, "fraction-train": 0.5,
           "client-threads": 1, "dataset": str(mnist)}  # fmt: skip
    runs, logs, trees, recorded = {}, {}, {}, {}
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            out = {**cfg, "output-dir": str(tmp_path / sig.name)}
            logs[sig] = tmp_path / f"{sig.name}.log"
            with open(logs[sig], "w") as log:
                runs[sig] = subprocess.Popen(
                    [sys.executable, "-c", CHILD, json.dumps(out)],
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        workers, left = {}, {}
        for sig, run in runs.items():
            deadline = time.monotonic() + 180
            while "configure_train" not in logs[sig].read_text():  # round 1: the workers train
                assert run.poll() is None, logs[sig].read_text()[-3000:]
                assert time.monotonic() < deadline, logs[sig].read_text()[-3000:]
                time.sleep(0.2)
        time.sleep(1)
        for sig, run in runs.items():
            trees[sig] = process_tree([run.pid]) - {run.pid}
            recorded.update({pid: argv(pid) for pid in trees[sig]})
            workers[sig] = [p for p in trees[sig] if "multiprocessing.spawn" in " ".join(argv(p))]
            run.send_signal(sig)
        for sig, run in runs.items():
            run.wait(timeout=30)
            left[sig] = _gone_within(trees[sig], 3)[0]
    finally:
        for run in runs.values():
            run.kill()
        _kill_left(recorded)
    assert {sig: len(pids) for sig, pids in workers.items()} == {sig: 2 for sig in runs}, trees
    assert left == {signal.SIGTERM: set(), signal.SIGKILL: set()}, left
