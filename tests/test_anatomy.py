"""`benchmarks.anatomy` takes a deployment message apart from a SuperNode's DEBUG log: the
stages between Flower's lines and the app's, and import seconds by the package they came
through. A log in the form Flower 1.42 writes it (colour codes included)."""

from __future__ import annotations

import pytest

from benchmarks.anatomy import handler_parts, import_seconds, messages, table

LOG = """\x1b[92mINFO 2026-11-29 09:27:25,000\x1b[0m:      Receiving: train message (ID: 16)
\x1b[92mINFO 2026-11-29 09:27:26,000\x1b[0m:      Received successfully
\x1b[94mDEBUG 2026-11-29 09:27:26,500\x1b[0m:     Runtime.AcquireTask
\x1b[94mDEBUG 2026-11-29 09:27:27,500\x1b[0m:     Runtime.AcquireTask
import time:      1000 |       1000 |   flwr.common
\x1b[92mINFO 2026-11-29 09:27:29,500\x1b[0m:      Start `flwr-clientapp` process
\x1b[94mDEBUG 2026-11-29 09:27:29,600\x1b[0m:     [flwr-clientapp] Start FAB installation.
\x1b[94mDEBUG 2026-11-29 09:27:29,650\x1b[0m:     [flwr-clientapp] Start `ClientApp` Loading.
import time:    200000 |     200000 |       sympy
import time:   3000000 |    3200000 |     torch
import time:     10000 |      10000 |       pandas
import time:    500000 |     510000 |     datasets
import time:    100000 |    3810000 |   pfedgm_app.client_app
import time:      5000 |       5000 |   numpy
\x1b[94mDEBUG 2026-11-29 09:27:34,000\x1b[0m:     pFedGM app: train handler starts
\x1b[94mDEBUG 2026-11-29 09:27:38,100\x1b[0m:     Runtime.AcquireTask
\x1b[94mDEBUG 2026-11-29 09:27:40,050\x1b[0m:     pFedGM app: train handler: {parts}
\x1b[94mDEBUG 2026-11-29 09:27:40,150\x1b[0m:     Runtime.PushMessages
\x1b[92mINFO 2026-11-29 09:27:40,300\x1b[0m:      Sending: train message (ID: 17)
\x1b[94mDEBUG 2026-11-29 09:27:40,350\x1b[0m:     Finished task 3 of run 6
\x1b[92mINFO 2026-11-29 09:27:42,300\x1b[0m:      Sent successfully
\x1b[92mINFO 2026-11-29 09:27:45,000\x1b[0m:      Receiving: train message (ID: 18)
""".format(parts="data 1.000 s, model 0.050 s, compute 5.000 s")


def test_a_message_is_cut_at_flowers_lines_and_the_apps(tmp_path):
    (tmp_path / "supernode-0.log").write_text(LOG)
    (m,) = messages(tmp_path / "supernode-0.log")  # the second was never answered
    expected = {"receive": 1.0, "executor wait": 0.5, "process start": 3.0, "pull": 0.1,
                "FAB install": 0.05, "app load": 4.35, "data": 1.0, "model": 0.05,
                "compute": 5.0, "handler, the rest": 0.0, "reply": 0.3, "send": 2.0,
                "total": 17.3}  # fmt: skip
    assert m["type"] == "train"
    for stage, seconds in expected.items():
        assert m[stage] == pytest.approx(seconds, abs=1e-6), stage
    # imports after the app's loading only (flwr.common is Flower's start), by the package the
    # app imported them through: sympy is torch's, pandas is datasets'
    assert m["imports: torch"] == pytest.approx(3.2) and m["imports: app"] == pytest.approx(0.1)
    assert m["imports: datasets/pyarrow"] == pytest.approx(0.51)
    assert m["imports: other"] == pytest.approx(0.005) and "imports: flwr" not in m
    assert "train messages: 1" in table([m], "train") and "(no query" in table([m], "query")


def test_import_seconds_go_to_the_outermost_package_below_the_app():
    lines = [(5, 2, "sympy.core"), (10, 1, "sympy"), (20, 0, "torch"), (1, 0, "json")]
    assert import_seconds(lines) == pytest.approx({"imports: torch": 35e-6, "imports: other": 1e-6})


def test_a_simulations_handler_lines_are_read_from_its_log():
    log = (
        "(ClientAppActor pid=1) DEBUG : pFedGM app: train handler: data 0.000 s, "
        "model 0.010 s, compute 2.500 s\nINFO : pFedGM app: query handler: data 1.500 s\n"
    )
    assert handler_parts(log) == [
        {"type": "train", "data": 0.0, "model": 0.01, "compute": 2.5},
        {"type": "query", "data": 1.5},
    ]
