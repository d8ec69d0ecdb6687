"""The in-process engine's worker processes (`InProcessGrid(workers=N)`): a pool of N spawned
processes that answer messages with the ClientApp, several at a time, the way several
ClientApps share one GPU.

Each worker ends as soon as the process that started it does, however that ends. Python's
pool leaves a worker that is answering a message running when its parent is stopped (SIGTERM)
or killed (SIGKILL): it finishes the message (a whole round of training, holding its model and
data) for no one. So each worker watches its parent from a thread and exits the moment it has
another one (an orphan is re-parented). Linux's PR_SET_PDEATHSIG would do the same without
polling, but it fires when the *thread* that spawned the worker ends, and the pool spawns
workers from whichever thread first submits to it. This module imports nothing heavy, so
that the watch starts before the worker imports torch and the app.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flwr.app import Context, Message

    from .answer import ClientAppLike

PARENT_POLL_SECONDS = 0.2  # as Flower's own processes watch theirs (--parent-pid)

_WORKER_APP: ClientAppLike | None = None  # a pool process's ClientApp


def worker_pool(workers: int, client_app: ClientAppLike | None = None) -> ProcessPoolExecutor:
    """`workers` spawned processes (a forked child cannot use CUDA once the parent has), each
    with its share of the cores, that answer messages (`answer_in_worker`) with `client_app`
    (the app's ClientApp when None; one given must pickle) and end with this process."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    return ProcessPoolExecutor(
        workers,
        multiprocessing.get_context("spawn"),
        _start_worker,
        (os.getpid(), threads, client_app),
    )


def watch_parent(parent: int, interval: float = PARENT_POLL_SECONDS) -> threading.Thread:
    """Exit this process (at once, without cleanup: nothing is left to hand its work to) as
    soon as `parent` is no longer its parent, checked every `interval` seconds."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    thread = threading.Thread(target=watch, name="watch-parent", daemon=True)
    thread.start()
    return thread


def _start_worker(parent: int, threads: int, app: ClientAppLike | None) -> None:
    """A pool process: the watch on its parent first, then its share of the cores (unless the
    run sets client-threads), its ClientApp (the app's, loaded as Flower loads it, unless one
    is given) and the task identity the ServerApp's process has."""
    watch_parent(parent)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    from .answer import _set_task_identity, app_component

    global _WORKER_APP
    _WORKER_APP = app if app is not None else app_component("clientapp")
    _set_task_identity()


def answer_in_worker(msg: Message, context: Context) -> tuple[Message, Context | None, float]:
    """`answer.answer` with this worker's ClientApp (what the pool is given to run)."""
    from .answer import answer

    assert _WORKER_APP is not None  # the pool's initializer, `_start_worker`, set it
    return answer(_WORKER_APP, msg, context)
