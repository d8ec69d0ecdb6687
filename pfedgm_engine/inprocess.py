"""The app's ServerApp and ClientApp in one Python process, without Ray or a SuperLink.

`InProcessGrid` is a `flwr.serverapp.Grid` whose SuperNodes are `Context`s in this process
(node config, persistent state, as Flower gives them). It answers each message the way
Flower's simulation engine does: it calls the `ClientApp` object with the message and the
node's context, so the ClientApp routes the message by its type to whichever handler is
registered for it (`@app.train("action")` answers "train.action"), and a handler that raises
becomes an error reply (`Message(Error(...), reply_to=msg)`, the code and reason Flower's engine
gives) that the ServerApp sees as `reply.has_error()`, while the node's context stays as it was
before the message. The ServerApp is the `ServerApp` object, called with the grid and its
context. Both are the app's components named in `pyproject.toml` (`[tool.flwr.app.components]`).

It exists for the machines where Flower's simulation engine is not installed (a lent GPU
machine has torch but no Ray) and for benchmarks that separate client compute from the engine's
overhead. Results equal a simulation's in what the app computes (`tests/test_inprocess.py`
compares every method's per-client results with `flwr run`'s). With `workers=1` the SuperNodes
answer one after the other in this process; with `workers=N` a pool of N spawned processes
answers N messages at a time (each message travels with its node's `Context`, as Flower's
simulation engine moves a node's state to whichever actor runs it), the way several ClientApps
share one GPU; a worker ends with this process, stopped or killed (`workers`). How a node
answers, in either: `answer`. Tests of the app itself go through `pfedgm_cli.flwr_cli`.
"""

from __future__ import annotations

import copy
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any
from uuid import uuid4

# Besides Flower's public API, the grid needs `Run` (what `Grid.run` returns), a name Flower
# does not export (`answer` takes the others; `tests/test_public_api.py` pins them all).
from flwr.app import Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run

from pfedgm_app.methods import run_config_keys
from pfedgm_app.protocol import wire
from pfedgm_app.protocol.replies import message_round
from pfedgm_app.protocol.wire import PERSONALIZE_MESSAGE_TYPE
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_cli import APP_DIR

from .answer import (
    RUN_ID,
    SERVERAPP_NODE_ID,
    ClientAppLike,
    _set_task_identity,
    answer,
    app_component,
    run_identity,
)
from .workers import answer_in_worker, worker_pool

# Where the engine's users import them from: the app's components, a run's identity, the
# task identity a benchmark sets, and what answers a node
__all__ = ["APP_DIR", "ClientAppLike", "InProcessGrid", "RunStopped", "_set_task_identity",
           "app_component", "run_identity", "run_inprocess"]  # fmt: skip


class RunStopped(Exception):
    """Raised by an `InProcessGrid` told to stop: the ServerApp dies as if killed."""


class InProcessGrid(Grid):
    """A Grid whose SuperNodes are `Context`s in this process, answered by `client_app` (the
    app's ClientApp by default); records seconds per message type and per train round.

    With `stop_after_rounds=k`, the (k+1)-th round's train messages raise `RunStopped`. With
    `workers > 1`, messages are answered by that many spawned processes (call `close`), which
    end with this process however it ends (`workers.worker_pool`); a `client_app` given then
    must pickle (a ClientApp or function defined at a module's top level).
    """

    def __init__(
        self,
        run_config: dict[str, Any],
        num_partitions: int,
        stop_after_rounds: int | None = None,
        workers: int = 1,
        client_app: ClientAppLike | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers}: give 1 (this process) or more")
        self.stop_after_rounds = stop_after_rounds
        self.client_app = client_app if client_app is not None else app_component("clientapp")
        self.pool = worker_pool(workers, client_app) if workers > 1 else None
        self.contexts = {
            node: Context(
                RUN_ID,
                node,
                {wire.PARTITION_ID: node - 1, wire.NUM_PARTITIONS: num_partitions},
                RecordDict(),
                run_config,
            )
            for node in range(1, num_partitions + 1)
        }
        self._run = Run.create_empty(RUN_ID)
        self._pending: dict[str, Message] = {}  # pushed, not answered yet (workers=1)
        self._futures: dict[str, tuple[Message, Future]] = {}  # pushed to the pool
        self._exchange: tuple[str, int] | None = None  # (message type, round) last pushed
        self.client_seconds: dict[str, float] = {}
        self.rounds: list[tuple[float, float]] = []  # (client seconds, sample-passes) per round
        self.starts: list[tuple[str, float]] = []  # (message type, clock) of each exchange

    def seconds_per_round(self) -> float:
        """Wall seconds per train round (server side included), over the rounds after the
        first, which also decodes each client's images."""
        trains = [t for kind, t in self.starts if kind == MessageType.TRAIN]
        end = next(t for kind, t in self.starts if kind == PERSONALIZE_MESSAGE_TYPE)
        return (end - trains[1]) / (len(trains) - 1) if len(trains) > 1 else end - trains[0]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None

    # -- Grid -----------------------------------------------------------------------------------
    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(  # Flower's signature
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Give each message an id (as Flower's grid does) and queue it for its SuperNode (in
        the pool: start it); a message to a node that does not exist gets the empty id, as the
        SuperLink answers a message it cannot store."""
        ids: list[str] = []
        for msg in messages:
            if msg.metadata.dst_node_id not in self.contexts:
                ids.append("")
                continue
            msg.metadata.__dict__["_message_id"] = str(uuid4())  # as Flower's InMemoryGrid
            if not (msg.metadata.reply_to_message_id == "" and msg.metadata.ttl > 0):
                raise ValueError(f"Invalid message: {msg}")
            self._account_push(msg)
            msg_id = msg.metadata.message_id
            if self.pool is None:
                self._pending[msg_id] = msg
            else:
                context = self.contexts[msg.metadata.dst_node_id]
                self._futures[msg_id] = (msg, self.pool.submit(answer_in_worker, msg, context))
            ids.append(msg_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The replies to those of `message_ids` that are answered: in this process, every
        one (answered now, in the order pushed); in the pool, those finished."""
        wanted = set(message_ids)
        if self.pool is None:
            answers = []
            for msg_id in [i for i in self._pending if i in wanted]:
                msg = self._pending.pop(msg_id)
                # The ClientApp gets its own copy of the message, as it would from the engine
                # (the arrays' bytes are shared, immutable): a handler that changes its message
                # changes nothing the ServerApp or the other nodes see. Its context is copied
                # so that a handler that raises leaves the node's context as it was.
                context = self.contexts[msg.metadata.dst_node_id]
                answers.append(
                    (msg, answer(self.client_app, copy.deepcopy(msg), copy.deepcopy(context)))
                )
        else:
            done = [i for i in wanted if i in self._futures and self._futures[i][1].done()]
            answers = [(m, f.result()) for m, f in (self._futures.pop(i) for i in done)]
        return [self._receive(msg, *answer) for msg, answer in answers]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push `messages` and return their replies. In this process every message is answered
        (`timeout` cannot interrupt a ClientApp here); in the pool, those answered within
        `timeout` seconds (None: all), as Flower's grid."""
        ids = {i for i in self.push_messages(messages) if i}
        if self.pool is None:
            return list(self.pull_messages(ids))
        futures = [self._futures[i][1] for i in ids]
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while ids:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            wait(futures, timeout=left, return_when=FIRST_COMPLETED)
            arrived = list(self.pull_messages(ids))
            replies.extend(arrived)
            ids.difference_update(m.metadata.reply_to_message_id for m in arrived)
            futures = [self._futures[i][1] for i in ids]
            if not arrived and deadline is not None and time.monotonic() >= deadline:
                break  # unanswered messages stay in flight; their replies are never pulled
        return replies

    # -- accounting -----------------------------------------------------------------------------
    def _account_push(self, msg: Message) -> None:
        """A message of another type or round than the last pushed starts an exchange: a train
        round past `stop_after_rounds` stops the run; its start is recorded."""
        kind = msg.metadata.message_type
        exchange = (kind, message_round(msg))
        if exchange == self._exchange:
            return
        if kind == MessageType.TRAIN and len(self.rounds) == self.stop_after_rounds:
            raise RunStopped(f"stopped after round {self.stop_after_rounds}")
        self._exchange = exchange
        self.starts.append((kind, time.perf_counter()))
        if kind == MessageType.TRAIN:
            self.rounds.append((0.0, 0.0))

    def _receive(
        self, msg: Message, reply: Message, context: Context | None, seconds: float
    ) -> Message:
        """Keep the node's context after `reply` (unless the ClientApp raised); add the
        ClientApp's seconds (and a train reply's sample passes) to the accounts."""
        if context is not None:
            self.contexts[msg.metadata.dst_node_id] = context
        kind = msg.metadata.message_type
        self.client_seconds[kind] = self.client_seconds.get(kind, 0.0) + seconds
        if kind == MessageType.TRAIN and self.rounds:
            records = reply.content.metric_records if reply.has_content() else None
            metrics = None if records is None else records.get(wire.METRICS)
            passes = 0.0 if metrics is None else metrics.get("sample-passes", 0.0)
            spent, total = self.rounds[-1]
            counted = float(passes) if isinstance(passes, int | float) else 0.0  # a number or none
            self.rounds[-1] = (spent + seconds, total + counted)
        return reply


def run_inprocess(
    overrides: dict[str, Any],
    num_partitions: int,
    stop_after_rounds: int | None = None,
    workers: int = 1,
    client_app: ClientAppLike | None = None,
) -> tuple[dict, InProcessGrid]:
    """Run the app's ServerApp over `num_partitions` in-process SuperNodes answered by its
    ClientApp (or `client_app`); returns the `summary.json` it wrote and the grid (for its
    timings). Defaults are the app's own. `stop_after_rounds=k` kills the run (`RunStopped`)
    when round k+1 would start; `workers=N` answers messages in N processes at once."""
    run_config = {**run_config_keys(), **overrides}
    if not run_config.get("output-dir"):
        run_config["output-dir"] = tempfile.mkdtemp(prefix="pfedgm-inprocess-")
    server_app: ServerApp = app_component("serverapp")
    grid = InProcessGrid(run_config, num_partitions, stop_after_rounds, workers, client_app)
    with run_identity():
        try:
            server_app(grid, Context(RUN_ID, SERVERAPP_NODE_ID, {}, RecordDict(), run_config))
        finally:
            grid.close()
    return RunFolder(Path(run_config["output-dir"])).read_summary(), grid
