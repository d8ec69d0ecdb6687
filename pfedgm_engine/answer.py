"""A SuperNode's answer to a message in the in-process engine, as Flower's simulation engine
gives it: the app's components loaded as Flower loads them, the ClientApp called with the
message and the node's context, and a ClientApp that raises turned into an error reply with
Flower's code and reason. `inprocess.InProcessGrid` calls `answer` in its own process or, with
workers, in the processes of `workers.worker_pool`.
"""

from __future__ import annotations

import importlib
import time
import tomllib
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from logging import ERROR
from pathlib import Path
from typing import Any
from uuid import uuid4

# Besides the public `flwr.app`, `flwr.clientapp`, `flwr.serverapp` and `flwr.common.log`,
# an engine needs names Flower does not export; this package alone takes them (the app uses
# none: `tests/test_public_api.py` pins this list). The error replies are built
# from the exception types and codes of Flower's own modules (`ClientAppException`,
# `LoadClientAppError`, `ErrorCode`); Flower sets a process's `TaskIdentity` before it runs an
# app, and `Message(...)` reads it, so a ServerApp run outside Flower needs one. Message ids
# are written into `Metadata._message_id`, as Flower's grids and engine write them (it has no
# setter), and the identity a block had before into `TaskIdentity`'s fields (its getters raise
# where it has none). docs/upstream/inprocess-engine.md asks for a public way.
from flwr.app import Context, Error, Message
from flwr.clientapp import ClientApp
from flwr.clientapp.client_app import ClientAppException, LoadClientAppError
from flwr.common import log
from flwr.common.constant import ErrorCode
from flwr.supercore.task_identity import TaskIdentity

from pfedgm_cli.flwr_cli import APP_DIR

# What answers a SuperNode's messages: the app's `ClientApp`, or anything called as Flower
# calls one (e.g. a function that records what the ClientApp replies)
ClientAppLike = ClientApp | Callable[[Message, Context], Message]
RUN_ID = 1
SERVERAPP_NODE_ID = 0  # the ServerApp's context node id under Flower (run_serverapp)


def app_component(name: str, root: Path = APP_DIR) -> Any:
    """The app's `serverapp` or `clientapp` object, loaded from the "module:attribute"
    reference in `[tool.flwr.app.components]` of `pyproject.toml`, as Flower loads them."""
    with open(root / "pyproject.toml", "rb") as f:
        reference = tomllib.load(f)["tool"]["flwr"]["app"]["components"][name]
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _set_task_identity() -> None:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = RUN_ID, SERVERAPP_NODE_ID, 1


@contextmanager
def run_identity() -> Iterator[None]:
    """Inside the block this process has a run's identity, as Flower gives a running app's, so
    that `Message(...)` can be built (tests of strategies with plain messages); after it, the
    identity it had (none: Flower's fields hold None, which its getters refuse to return)."""
    before = TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id
    _set_task_identity()
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = before


def _error_reply(msg: Message, exc: Exception) -> Message:
    """The reply Flower's simulation engine sends for a ClientApp that raised (vce_api.worker:
    the actor wraps the exception in `ClientAppException`, the reason is "<class>:<'text'>")."""
    if isinstance(exc, ClientAppException):
        code = ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    elif isinstance(exc, LoadClientAppError):
        code = ErrorCode.LOAD_CLIENT_APP_EXCEPTION
    else:
        code = ErrorCode.UNKNOWN
    return Message(Error(code=code, reason=f"{type(exc)}:<'{exc}'>"), reply_to=msg)


def answer(
    app: ClientAppLike, msg: Message, context: Context
) -> tuple[Message, Context | None, float]:
    """One SuperNode's answer to `msg`: the reply, its context after it (None when the
    ClientApp raised: the node keeps the context it had) and the seconds the ClientApp took."""
    after: Context | None = context  # the node's context after the message
    started = time.perf_counter()
    try:
        try:
            reply = app(msg, context)
        except LoadClientAppError:
            raise
        except Exception as exc:  # as Flower's actor: the ClientApp's exception, wrapped
            raise ClientAppException(str(exc)) from exc
    except Exception as exc:  # as Flower's engine: an error reply, never a crash
        log(ERROR, "%s", exc)
        log(ERROR, "%s", traceback.format_exc())
        reply, after = _error_reply(msg, exc), None
    seconds = time.perf_counter() - started
    reply.metadata.__dict__["_message_id"] = str(uuid4())  # as the engine's (vce_api.worker)
    return reply, after, seconds
