"""What the server's checks of the replies cost per round, and whether clipping touches an
honest round.

    python -m benchmarks.bench_checks [--replies 30] [--repeats 5]

Times `PFedGM.aggregate_train` on `--replies` replies of the CIFAR-100 pFedGM model (the
paper's q = 0.3 of 100 clients: 30), each the global arrays plus noise, with every check and
clipping (the app's default), against the bare weighted mean of the same arrays; prints the
median seconds of each over `--repeats` (A-B-B-A order) and their difference. Then runs 4
MNIST clients for 2 rounds with every client in every round (so that the round has a median
to clip against) with clip-ratio 5 (the default) and 0, and prints whether the per-client
results are identical and the largest update norm over the round's median.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from pfedgm_app.learning.gaussian import GaussianHead
from pfedgm_app.learning.models import build_model
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.strategies import PFedGM
from pfedgm_app.strategies.robust import weighted_mean
from pfedgm_engine.inprocess import _set_task_identity, run_inprocess

ROOT = Path(__file__).resolve().parents[1]


def replies(arrays: ArrayRecord, n: int) -> list[Message]:
    rng = np.random.default_rng(0)
    out = []
    for node in range(1, n + 1):
        noisy = {k: (v.numpy() + 0.01 * rng.standard_normal(v.shape)).astype(np.float32)
                 for k, v in arrays.items()}  # fmt: skip
        noisy["head.A"] = np.abs(noisy["head.A"]) + 0.1
        content = RecordDict(
            {
                "arrays": ArrayRecord({k: Array(v) for k, v in noisy.items()}),
                "metrics": MetricRecord({"num-examples": 500, "loss": 1.0}),
            }
        )
        ins = Message(RecordDict(), dst_node_id=node, message_type="train")
        out.append(Message(content, reply_to=ins))
    return out


def time_round(arrays: ArrayRecord, msgs: list[Message], checked: bool) -> float:
    start = time.perf_counter()
    if checked:
        strategy = PFedGM()
        strategy.sent_arrays[1] = arrays
        strategy.aggregate_train(1, msgs)
    else:
        weighted_mean([(500.0, m.content["arrays"]) for m in msgs])
    return time.perf_counter() - start


def clipping_check() -> None:
    default = RunConfig().clip_ratio
    data = ROOT.parent / "shared/data/mnist"
    tiny = {
        "num-server-rounds": 2,
        "local-epochs": 1,
        "personal-epochs": 1,
        "lbfgs-cycles": 1,
        "pool-size": 1200,
        "fraction-train": 1.0,
        "client-threads": 1,
        "dataset": str(data),
    }
    rows, ratios = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for clip in (default, 0.0):
            out = Path(tmp) / f"clip{clip:g}"
            run_inprocess({**tiny, "clip-ratio": clip, "output-dir": str(out)}, 4)
            rows[clip] = [{k: v for k, v in r.items() if not k.startswith("seconds")}
                          for r in RunFolder(out).read_clients()]  # fmt: skip
            if clip:
                ratios += [r["update-norm-ratio-max"] for r in RunFolder(out).read_rounds()]
    same = "identical" if rows[default] == rows[0.0] else "DIFFERENT"
    print(
        f"honest run, clip-ratio {default:g} vs 0: per-client results {same}; largest update "
        f"norm over the round's median: {max(ratios):.2f} (clipping starts at {default:g})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replies", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    _set_task_identity()
    torch.manual_seed(0)
    model = build_model((3, 32, 32), lambda d: GaussianHead(100, d))
    arrays = ArrayRecord(model.state_dict())
    msgs = replies(arrays, args.replies)
    times = {True: [], False: []}
    for _ in range(args.repeats):
        for checked in (True, False, False, True):  # A-B-B-A
            times[checked].append(time_round(arrays, msgs, checked))
    checked, bare = (statistics.median(times[k]) for k in (True, False))
    size = sum(len(a.data) for a in arrays.values()) / 1e6
    print(
        f"{args.replies} replies of {size:.2f} MB: checked + clipped aggregation "
        f"{checked:.3f} s, bare weighted mean {bare:.3f} s, the checks {checked - bare:.3f} s "
        "per round"
    )
    clipping_check()


if __name__ == "__main__":
    main()
