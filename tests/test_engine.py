"""The simulation engine's poller yields to the ClientApps (`pfedgm_app/engine.py`)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pfedgm_app.config import ConfigError, RunConfig
from pfedgm_app.engine import (
    AUTO,
    ENGINE_POLLERS,
    in_simulation_engine,
    lower_priority,
    messages_in_flight,
)

# In a fresh process (a nice value cannot be lowered back without privileges): a thread on a
# function named as Flower's poller, one on another function, then lower_priority. Threads
# the poller starts later, and the processes they spawn, inherit its value; the others keep 0.
PROBE = textwrap.dedent(
    """
    import json, os, subprocess, sys, threading
    from pfedgm_app.engine import lower_priority
    stop, go, tids, child = threading.Event(), threading.Event(), {}, {}
    def add_messages_to_queue():  # the name of Flower 1.42's poller
        tids["poller"] = threading.get_native_id()
        go.wait()
        child["nice"] = int(subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"],
                                           capture_output=True, text=True).stdout)
        stop.wait()
    def put_message_into_state():
        tids["other"] = threading.get_native_id()
        stop.wait()
    threads = [threading.Thread(target=f) for f in (add_messages_to_queue, put_message_into_state)]
    for t in threads:
        t.start()
    while len(tids) < 2:
        pass
    ids = lower_priority(7)
    go.set()
    while "nice" not in child:
        pass
    nice = {k: os.getpriority(os.PRIO_PROCESS, v) for k, v in tids.items()}
    nice["main"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    stop.set()
    print(json.dumps({"ids": ids, "tids": tids, "nice": nice, "child": child["nice"]}))
    """
)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread nice is Linux's")
def test_only_the_engine_poller_thread_yields():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ids"] == [result["tids"]["poller"]]
    assert result["nice"] == {"poller": 7, "other": 0, "main": 0}  # Ray's spawner stays at 0
    assert result["child"] == 7  # what a reniced thread spawns inherits it: hence only the poller


def test_lower_priority_rejects_values_outside_nice_range():
    for bad in (-1, 20):
        with pytest.raises(ValueError, match="nice must lie in"):
            lower_priority(bad)


def test_no_poller_here_and_this_is_not_the_engine():
    assert lower_priority(0, targets=ENGINE_POLLERS) == []  # pytest runs no Flower engine
    assert not in_simulation_engine()  # pytest, the in-process driver: never reniced


def test_messages_in_flight_auto_is_twice_the_cores_in_the_simulation_process_only(monkeypatch):
    assert RunConfig().messages_in_flight == 0  # the default: all at once, as Flower's grids
    assert messages_in_flight(AUTO) == 0  # here: not Flower's simulation process
    monkeypatch.setattr(sys, "argv", ["/venv/bin/flwr-simulation", "--insecure"])
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    assert messages_in_flight(AUTO) == 6
    assert [messages_in_flight(n) for n in (0, 1, 40)] == [0, 1, 40]  # as given, anywhere


def test_messages_in_flight_below_auto_is_refused():
    with pytest.raises(ConfigError, match="messages-in-flight must be >= -1"):
        RunConfig(messages_in_flight=-2).validate()
