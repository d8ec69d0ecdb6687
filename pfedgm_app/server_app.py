"""ServerApp: the paper's two phases (`experiment`). Phase 1: rounds of the method's strategy
over the sampled clients, from a random model or a stored run's (`initial-model`). Phase 2: the
personalize round on every client, which keeps its personalized model. Every check runs before
round 1; outputs go to `output-dir` as the run goes (`results.RunWriter`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from logging import ERROR, INFO

from flwr.app import Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from .data import resolve_dataset
from .methods import parse_run_config
from .records import initial_model
from .records.results import RunWriter
from .runconfig.settings import ConfigError
from .server.experiment import experiment
from .server.federation import discover_clients
from .server.rounds import RunStopped
from .strategies import WindowedGrid
from .strategies.window import messages_in_flight

app = ServerApp()


class ExplainedRefusal(logging.Filter):
    """A run the app refuses (a `ConfigError`) or stops (`RunStopped`: no round could train)
    has been explained in one `pFedGM app:` line; Flower then logs the exception again with
    its whole traceback, burying that line. This filter on Flower's logger keeps the line
    last: Flower's record of such an exception is dropped and its traceback logged at DEBUG.
    Any other exception is logged as Flower logs it, after the app's line.
    (The proposal to do this in Flower: docs/upstream/serverapp-user-error.md.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if record.levelno < ERROR or not isinstance(exc, ConfigError | RunStopped):
            return True
        logging.getLogger("flwr").debug("the refused run's traceback", exc_info=record.exc_info)
        return False


logging.getLogger("flwr").addFilter(ExplainedRefusal())


@app.main()
def main(grid: Grid, context: Context) -> None:
    """The whole experiment: Phase 1 (rounds), then Phase 2 (personalize), outputs on disk."""
    started = time.time()
    writer = None
    try:  # every check before round 1: a bad run-config or federation ends the run here
        cfg, method, settings = parse_run_config(context.run_config)
        # the dataset's path and the window (auto: by where the ServerApp runs) as resolved,
        # so that config.json says what ran
        window = messages_in_flight(cfg.messages_in_flight)
        cfg = dataclasses.replace(
            cfg, dataset=resolve_dataset(cfg.dataset), messages_in_flight=window
        )
        initial = initial_model.read(cfg) if cfg.initial_model else None  # before any message
        grid = WindowedGrid(grid, window, straggler_wait=cfg.straggler_wait)  # every exchange
        if grid.window:
            log(INFO, "pFedGM app: at most %d messages in flight (messages-in-flight)", grid.window)
        writer = RunWriter.create(cfg, settings, started)
        left_out: dict[int, str] = {}  # min-nodes: SuperNodes that could not take part, why
        clients = discover_clients(grid, cfg, left_out)  # the clients load their data
        experiment(grid, cfg, method, settings, writer, clients, left_out, initial)
    except Exception as exc:  # the cause in the app's words, the last line `pfedgm run` shows
        log(ERROR, "pFedGM app: %s", _cause(exc))
        raise
    finally:
        if writer is not None:
            writer.close()


def _cause(exc: Exception) -> str:
    """One line: the app's own message, or an unexpected exception's name and message."""
    text = " ".join(str(exc).split()) or "(no message)"
    return text if isinstance(exc, ConfigError | RunStopped) else f"{type(exc).__name__}: {text}"
