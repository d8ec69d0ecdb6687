"""The simulation engine's poller yields to the ClientApps and polls an index of messages by
node (`pfedgm_app/engine.py`)."""

import dataclasses
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import flwr
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.proto.task_pb2 import Task  # pylint: disable=E0611
from flwr.server.superlink.fleet.vce.vce_api import _register_nodes
from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState, RunRecord
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from flwr.superlink.federation import NoOpFederationManager
from flwr.superlink.grid import InMemoryGrid

from pfedgm_app.config import ConfigError, RunConfig
from pfedgm_app.engine import (
    AUTO,
    ENGINE_POLLERS,
    in_simulation_engine,
    index_pending_messages,
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


# -- the engine's polls through an index of messages by node (engine.index_pending_messages) --


@pytest.fixture
def link_state(monkeypatch):
    """`make(nodes)` -> (Flower 1.42's in-memory link state with a run and `nodes` registered
    nodes, a grid pushing to it as the ServerApp does, the node ids), as Flower's simulation
    builds them. The class's methods are restored after the test (the index patches the
    class)."""
    for name in ("get_message_ins", "store_message_ins"):
        monkeypatch.setattr(InMemoryLinkState, name, getattr(InMemoryLinkState, name))
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, SUPERLINK_NODE_ID, 1

    def make(nodes: int):
        factory = LinkStateFactory(
            FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
        )
        state = factory.state()
        run = Run.create_empty(7)
        run = dataclasses.replace(run, federation_id=NOOP_FEDERATION_ID, primary_task_id=1)
        state.run_ids[7] = RunRecord(run=run)
        state.task_store[1] = Task(task_id=1, run_id=7)
        node_ids = list(_register_nodes(nodes, factory))
        grid = InMemoryGrid(state_factory=factory)
        grid.set_run(run)
        return state, grid, node_ids

    yield make
    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None


def _push(grid, node_ids, targets, ttl=None):
    """Messages tagged t to node_ids[i] for each (t, i) in targets."""
    messages = [grid.create_message(RecordDict({"c": ConfigRecord({"tag": t})}), MessageType.TRAIN,
                                    node_ids[i], "g", ttl=ttl) for t, i in targets]  # fmt: skip
    return list(grid.push_messages(messages))


def _engine_story(make) -> list:
    """What Flower's engine poller (each node asked for one message, node after node) hands
    over through a story of pushes, asks, expiry and a pull of replies."""
    state, grid, nodes = make(5)
    seen = []

    def sweep():
        seen.append([(nodes.index(n), m.content["c"]["tag"]) for n in nodes
                     for m in state.get_message_ins(node_id=n, limit=1)])  # fmt: skip

    first = _push(grid, nodes, [("a", 0), ("b", 1), ("c", 1), ("d", 3)])
    sweep(), sweep(), sweep()  # b then c for node 1, one a sweep
    _push(grid, nodes, [("e", 2), ("f", 0)], ttl=0.05)  # expire before anyone asks
    time.sleep(0.1)
    sweep()
    seen.append(len(state.message_ins_store))  # the expired two are deleted when asked for
    _push(grid, nodes, [("g", 4), ("h", 4), ("i", 2)])
    seen.append([m.content["c"]["tag"] for m in state.get_message_ins(nodes[4], None)])  # all
    seen.append(state.get_message_ins(nodes[2], 1, run_id=8))  # another run's: none
    sweep(), sweep()
    for message_id, node in zip(first, (0, 1, 1, 3), strict=True):  # the clients reply
        ins = state.message_ins_store[message_id]
        reply = Message(RecordDict(), reply_to=ins)
        reply.metadata.__dict__.update(_message_id=f"r{message_id}", _src_node_id=nodes[node])
        assert state.store_message_res(reply) is not None
    seen.append(len(grid.pull_messages(first)))
    seen.append(len(state.message_ins_store))
    with pytest.raises(AssertionError, match="limit"):
        state.get_message_ins(nodes[0], 0)  # Flower's own refusal stays
    return seen


def test_indexed_polls_hand_over_what_flowers_own_do(link_state):
    plain = _engine_story(link_state)
    assert plain[:4] == [[(0, "a"), (1, "b"), (3, "d")], [(1, "c")], [], []]  # the story ran
    assert index_pending_messages() == ""
    assert getattr(InMemoryLinkState.get_message_ins, "__wrapped__", None) is not None
    assert index_pending_messages() == ""  # twice: wrapped once
    assert not hasattr(InMemoryLinkState.get_message_ins.__wrapped__, "__wrapped__")
    assert _engine_story(link_state) == plain


def test_indexed_poll_of_a_node_with_nothing_skips_flowers_walk(link_state, monkeypatch):
    """30 delivered, unanswered messages, 100 nodes: Flower's walk checks each message for each
    node asked (3,000 checks a sweep); indexed, a sweep checks none."""
    checks, check = [], InMemoryLinkState._check_stored_messages

    def counted(self, message_ids, *args, **kwargs):
        checks.extend(message_ids)
        return check(self, message_ids, *args, **kwargs)

    monkeypatch.setattr(InMemoryLinkState, "_check_stored_messages", counted)

    def sweep_checks(state, nodes):
        checks.clear()
        delivered = sum(len(state.get_message_ins(node_id=n, limit=1)) for n in nodes)
        return delivered, len(checks)

    state, grid, nodes = link_state(100)
    _push(grid, nodes, [(str(i), i) for i in range(30)])
    assert sweep_checks(state, nodes)[0] == 30
    assert sweep_checks(state, nodes) == (0, 3000)
    index_pending_messages()
    state, grid, nodes = link_state(100)
    _push(grid, nodes, [(str(i), i) for i in range(30)])
    assert sweep_checks(state, nodes)[0] == 30
    assert sweep_checks(state, nodes) == (0, 0)


def test_the_index_waits_for_the_flower_it_was_written_against(monkeypatch, link_state):
    monkeypatch.setattr(flwr, "__version__", "1.43.0")
    assert "flwr 1.43.0" in index_pending_messages()
    assert not hasattr(InMemoryLinkState.get_message_ins, "__wrapped__")  # left as it was
    assert RunConfig().engine_poll_index  # on by default; applied by the ServerApp (test_e2e)
