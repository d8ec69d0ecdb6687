"""Clients that stay inside every bound the server enforces, in process on MNIST: what they
claim is replaced by what the server knows, and what they move is named in the run's records.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, MetricRecord

from pfedgm_app.records.run_folder import RunFolder
from pfedgm_engine.inprocess import app_component, run_inprocess

pytestmark = pytest.mark.slow

# clients that learn (a consensus to pull against): honest FedAvg reaches about 80 % here
RUN = {"method": "fedavg", "num-server-rounds": 3, "fraction-train": 1.0, "local-epochs": 2,
       "learning-rate": 0.05, "pool-size": 3000, "client-threads": 1}  # fmt: skip
FORGED = 19  # times its true size: inside the weight bound (20x the median report)


def steering(msg, context):
    """The app's ClientApp, whose partition 0 sends its update sign-flipped and 9 times as long
    (inside the clip bound) and partition 1 claims 19 times its data everywhere, with an
    accuracy of 0."""
    honest = app_component("clientapp")
    reply = honest(msg, context)
    pid, kind = int(context.node_config["partition-id"]), msg.metadata.message_type
    if pid == 0 and kind == "train":
        sent, arrays = msg.content["arrays"], reply.content["arrays"]
        for key in list(arrays):
            step = arrays[key].numpy() - sent[key].numpy()
            arrays[key] = Array((sent[key].numpy() - 9 * step).astype(np.float32))
    if pid == 1 and reply.has_content() and "metrics" in reply.content:
        metrics = dict(reply.content["metrics"])
        for key in ("num-examples", "num-test"):
            if key in metrics:
                metrics[key] = FORGED * metrics[key]
        if "accuracy" in metrics:
            metrics["accuracy"] = 0.0
        reply.content["metrics"] = MetricRecord(metrics)
    return reply


def test_a_forged_size_counts_its_true_size_and_a_flipped_update_is_named(tmp_path, mnist, caplog):
    """The server computes each partition's sizes: partition 1's forged report is named, its
    train replies claiming more are dropped, its personalize row refused, so the headline is
    the honest clients'. Partition 0's flipped update is inside every bound and is named as
    pulling against the others in every round, in rounds.jsonl and summary.json."""
    out = tmp_path / "steered"
    caplog.set_level("INFO", logger="flwr")
    summary, _ = run_inprocess({**RUN, "dataset": str(mnist), "output-dir": str(out)}, 6,
                               client_app=steering)  # fmt: skip
    rows = {int(r["partition-id"]): r for r in RunFolder(out).read_clients()}
    assert 1 not in rows and sorted(rows) == [0, 2, 3, 4, 5]
    suspects = summary["suspects"]
    assert sum(s.startswith("query: node ") and "its partition holds" in s for s in suspects) == 1
    opposed = [s for s in suspects if "pulls against the others' consensus" in s]
    assert [s.split(":")[0] for s in opposed] == ["round 1", "round 2", "round 3"], suspects
    assert len({s.split(":")[1] for s in opposed}) == 1  # one node, partition 0's
    assert sum("'num-examples'" in d for d in summary["dropped-replies"]) == 3  # partition 1
    lines = RunFolder(out).read_rounds()
    assert all(any("pulls against" in s for s in r["suspects"]) for r in lines[:3])
    assert all(r["update-pull-min"] < -2 for r in lines[:3])
    last = [r for r in caplog.records if r.name == "flwr"][-1]  # the run's last line
    assert last.levelname == "WARNING" and "the result is suspect" in last.getMessage()
