"""The app's ServerApp and ClientApps in one Python process, without Ray or a SuperLink.

`InProcessGrid` answers the ServerApp's messages by calling the ClientApp's handlers
(`client_app.query`, `.train`, `.personalize`) directly, each with its own `Context` (node
config, persistent state) as Flower would give it. It exists for the machines where Flower's
simulation engine is not installed (a lent GPU machine has torch but no Ray) and for benchmarks
that separate client compute from the engine's overhead. Results equal a simulation's only in
what the app computes. With `workers=1` the SuperNodes answer one after the other in this
process; with `workers=N` a pool of N spawned processes answers a round's messages N at a time
(each message travels with its node's `Context`, as Flower's simulation engine moves a node's
state to whichever actor runs it), the way several ClientApps share one GPU. Tests of the app
itself go through `devtools.launch`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from flwr.app import Context, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from pfedgm_app import client_app, server_app, wire
from pfedgm_app.methods import run_config_keys
from pfedgm_app.wire import PERSONALIZE_MESSAGE_TYPE

HANDLERS = {
    MessageType.QUERY: client_app.query,
    MessageType.TRAIN: client_app.train,
    PERSONALIZE_MESSAGE_TYPE: client_app.personalize,
}


def _handle(kind: str, msg: Message, context: Context) -> tuple[Message, Context, float]:
    """One SuperNode's answer, its context after it (state may change) and the seconds spent."""
    start = time.perf_counter()
    reply = HANDLERS[kind](msg, context)
    return reply, context, time.perf_counter() - start


def _start_worker(threads: int) -> None:
    """A pool process: its share of the cores (unless the run sets client-threads), and the
    task identity the ServerApp's process has."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1


class RunStopped(Exception):
    """Raised by an `InProcessGrid` told to stop: the ServerApp dies as if killed."""


class InProcessGrid:
    """A Grid whose SuperNodes are `Context`s in this process; records seconds per message type.
    With `stop_after_rounds=k`, the (k+1)-th round's train messages raise `RunStopped`. With
    `workers > 1`, messages are answered by that many spawned processes (call `close`)."""

    def __init__(
        self,
        run_config: dict[str, Any],
        num_partitions: int,
        stop_after_rounds: int | None = None,
        workers: int = 1,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers}: give 1 (this process) or more")
        self.stop_after_rounds = stop_after_rounds
        self.pool = None
        if workers > 1:  # spawn: a forked child cannot use CUDA once the parent has
            threads = max(1, (os.cpu_count() or 1) // workers)
            self.pool = ProcessPoolExecutor(
                workers, multiprocessing.get_context("spawn"), _start_worker, (threads,)
            )
        self.contexts = {
            node: Context(
                1,
                node,
                {wire.PARTITION_ID: node - 1, wire.NUM_PARTITIONS: num_partitions},
                RecordDict(),
                run_config,
            )  # fmt: skip
            for node in range(1, num_partitions + 1)
        }
        self.client_seconds: dict[str, float] = {}
        self.rounds: list[tuple[float, float]] = []  # (client seconds, sample-passes) per round
        self.starts: list[tuple[str, float]] = []  # (message type, clock) of each batch sent

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

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages: Iterable[Message], timeout: float | None = None):
        replies, spent, passes = [], 0.0, 0.0
        messages = list(messages)
        kind = messages[0].metadata.message_type if messages else ""
        if kind == MessageType.TRAIN and len(self.rounds) == self.stop_after_rounds:
            raise RunStopped(f"stopped after round {self.stop_after_rounds}")
        self.starts.append((kind, time.perf_counter()))
        jobs = [(kind, msg, self.contexts[msg.metadata.dst_node_id]) for msg in messages]
        if self.pool is None:
            answers = (_handle(*job) for job in jobs)
        else:
            answers = (f.result() for f in [self.pool.submit(_handle, *job) for job in jobs])
        for msg, (reply, context, seconds) in zip(messages, answers, strict=True):
            self.contexts[msg.metadata.dst_node_id] = context
            replies.append(reply)
            if reply.has_content() and wire.METRICS in reply.content:
                passes += float(reply.content[wire.METRICS].get("sample-passes", 0.0))
            self.client_seconds[kind] = self.client_seconds.get(kind, 0.0) + seconds
            spent += seconds
        if replies and kind == MessageType.TRAIN:
            self.rounds.append((spent, passes))
        return replies


def run_inprocess(
    overrides: dict[str, Any],
    num_partitions: int,
    stop_after_rounds: int | None = None,
    workers: int = 1,
) -> tuple[dict, InProcessGrid]:
    """Run the ServerApp's `main` over `num_partitions` in-process SuperNodes; returns the
    `summary.json` it wrote and the grid (for its timings). Defaults are the app's own.
    `stop_after_rounds=k` kills the run (`RunStopped`) when round k+1 would start; `workers=N`
    answers messages in N processes at once."""
    run_config = {**run_config_keys(), **overrides}
    if not run_config.get("output-dir"):
        run_config["output-dir"] = tempfile.mkdtemp(prefix="pfedgm-inprocess-")
    grid = InProcessGrid(run_config, num_partitions, stop_after_rounds, workers)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    try:
        server_app.main(grid, Context(1, 0, {}, RecordDict(), run_config))
    finally:
        grid.close()
        TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None
    summary = Path(run_config["output-dir"]) / "summary.json"
    return json.loads(summary.read_text()), grid
