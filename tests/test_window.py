"""WindowedGrid: at most `window` messages unanswered at a time (0: all), its own polling, the
same replies as Flower's send_and_receive, the timeout, and refused pushes."""

from __future__ import annotations

import itertools
import sys

import pytest
from flwr.app import Message, MessageType, RecordDict

from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies import WindowedGrid
from pfedgm_app.strategies.window import AUTO, in_simulation_engine, messages_in_flight

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


class FakeGrid:
    """Answers each pushed message after `delay` pulls; records the peak unanswered count."""

    def __init__(self, delay: int = 2, refuse: int | None = None, silent=()) -> None:
        self.delay, self.refuse, self.silent = delay, refuse, set(silent)
        self.ids = itertools.count()
        self.unanswered: dict[str, list] = {}  # id -> [pulls left, message]
        self.peak, self.pushed = 0, []

    def get_node_ids(self):
        return [1, 2, 3]

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            if msg.metadata.dst_node_id == self.refuse:
                ids.append(None)
                continue
            ids.append(mid := f"m{next(self.ids)}")
            self.unanswered[mid] = [self.delay, msg]
            self.pushed.append(msg.metadata.dst_node_id)
        self.peak = max(self.peak, len(self.unanswered))
        return ids

    def pull_messages(self, message_ids):
        replies = []
        for mid in list(message_ids):
            entry = self.unanswered[mid]
            entry[0] -= 1
            if entry[0] <= 0 and entry[1].metadata.dst_node_id not in self.silent:
                del self.unanswered[mid]
                reply = Message(RecordDict(), reply_to=entry[1])
                reply.metadata.__dict__["_reply_to_message_id"] = mid
                replies.append(reply)
        return replies

    def send_and_receive(self, messages, *, timeout=None):
        raise AssertionError("WindowedGrid pushes and pulls itself")


def _messages(nodes):
    return [Message(RecordDict(), dst_node_id=n, message_type=MessageType.TRAIN) for n in nodes]


@pytest.mark.parametrize("window", [1, 3, 7, 50])
def test_keeps_at_most_window_in_flight_and_answers_every_message_in_order(window):
    inner = FakeGrid()
    grid = WindowedGrid(inner, window, poll_interval=0)
    replies = list(grid.send_and_receive(_messages(range(20))))
    assert inner.peak == min(window, 20)
    assert inner.pushed == list(range(20))  # pushed in the given order
    assert sorted(r.metadata.src_node_id for r in replies) == list(range(20))


def test_window_zero_pushes_all_at_once_and_polls_until_every_reply_is_in():
    inner = FakeGrid(delay=3)
    replies = WindowedGrid(inner, 0, poll_interval=0).send_and_receive(_messages(range(20)))
    assert inner.peak == 20 and inner.pushed == list(range(20))  # one push of all 20
    assert sorted(r.metadata.src_node_id for r in replies) == list(range(20))
    assert not inner.unanswered  # not Flower's send_and_receive (which sleeps 3 s a poll)
    with pytest.raises(ValueError, match="window must be >= 0"):
        WindowedGrid(FakeGrid(), -1)
    with pytest.raises(ValueError, match="window must be >= 0"):
        WindowedGrid(FakeGrid(), -1)


def test_timeout_stops_the_exchange_and_a_refused_push_is_not_waited_for():
    slow = WindowedGrid(FakeGrid(delay=10**9), 2, poll_interval=0.01)
    assert list(slow.send_and_receive(_messages(range(5)), timeout=0.1)) == []
    inner = FakeGrid(refuse=3)
    replies = WindowedGrid(inner, 2, poll_interval=0).send_and_receive(_messages(range(6)))
    assert sorted(r.metadata.src_node_id for r in replies) == [0, 1, 2, 4, 5]


def test_a_training_round_waits_for_stragglers_a_time_its_own_replies_give(monkeypatch):
    """One of four never answers: once half are in, the round waits straggler_wait x that
    long (at least the floor, shortened here), not its timeout, and counts the late reply. A
    query or personalize exchange waits its timeout; straggler_wait 0 too."""
    import time

    from pfedgm_app.strategies import window

    monkeypatch.setattr(window, "STRAGGLER_FLOOR", 0.3)
    grid = WindowedGrid(FakeGrid(silent=[3]), 0, poll_interval=0.01, straggler_wait=2.0)
    started = time.monotonic()
    replies = grid.send_and_receive(_messages(range(4)), timeout=60)
    assert len(replies) == 3 and grid.late == 1 and time.monotonic() - started < 5
    for kind in (MessageType.QUERY, "train.personalize"):
        waited = WindowedGrid(FakeGrid(silent=[3]), 0, poll_interval=0.01, straggler_wait=2.0)
        msgs = [Message(RecordDict(), dst_node_id=n, message_type=kind) for n in range(4)]
        started = time.monotonic()
        assert len(waited.send_and_receive(msgs, timeout=1.0)) == 3
        assert time.monotonic() - started >= 1.0, kind
    off = WindowedGrid(FakeGrid(silent=[3]), 0, poll_interval=0.01)
    started = time.monotonic()
    assert len(off.send_and_receive(_messages(range(4)), timeout=1.0)) == 3
    assert time.monotonic() - started >= 1.0


class StaleGrid(FakeGrid):
    """With each pull, also a reply to a message of an earlier round (an id never pushed here)
    from node 0, and a second reply to node 1's message."""

    def pull_messages(self, message_ids):
        replies = list(super().pull_messages(message_ids))
        old = Message(RecordDict(), reply_to=_messages([0])[0])
        old.metadata.__dict__["_reply_to_message_id"] = "an-earlier-round"
        again = Message(RecordDict(), reply_to=_messages([0])[0])
        again.metadata.__dict__["_reply_to_message_id"] = "m1"
        return replies + [old, again] if replies else replies


def test_a_reply_to_no_message_of_the_exchange_is_dropped_as_it_arrives():
    """Node 0 stays silent in this round while replies to other messages arrive: they are
    dropped and counted (`stale`), node 0's real reply is still waited for (late)."""
    grid = WindowedGrid(StaleGrid(silent=[0]), 0, poll_interval=0.001)
    replies = grid.send_and_receive(_messages(range(4)), timeout=0.5)
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m1", "m2", "m3"]
    assert grid.stale >= 2 and grid.late == 1


def test_delegates_everything_else():
    inner = FakeGrid()
    assert list(WindowedGrid(inner, 2).get_node_ids()) == [1, 2, 3]


def test_messages_in_flight_auto_is_twice_the_cores_in_the_simulation_process_only(monkeypatch):
    assert RunConfig().messages_in_flight == 0  # the default: all at once, as Flower's grids
    assert not in_simulation_engine()  # pytest, the in-process driver
    assert messages_in_flight(AUTO) == 0  # here: not Flower's simulation process
    monkeypatch.setattr(sys, "argv", ["/venv/bin/flwr-simulation", "--insecure"])
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    assert messages_in_flight(AUTO) == 6
    assert [messages_in_flight(n) for n in (0, 1, 40)] == [0, 1, 40]  # as given, anywhere


def test_messages_in_flight_below_auto_is_refused():
    with pytest.raises(ConfigError, match="messages-in-flight must be >= -1"):
        RunConfig(messages_in_flight=-2).validate()
