"""The attacks aimed at the influence bound, per honest client, at the smallest federations.

    python -m benchmarks.bench_influence [--methods fedavg,fedavgft,pfedgm] [--nodes 3,4,6]
        [--attacks reversed-9,...] [--set clip-ratio=1.0] [--deployment] [--markdown FILE]
        [--workdir DIR]

Each attack of `devtools.attacks.ATTACKS` named here runs on MNIST, every SuperNode every
round (`devtools.attacks.RUN`), beside its honest twin (the same run, every client honest),
for each method and number of SuperNodes; "a little is enough" needs 2 colluders of 6 and
runs at 6 only. Prints one row per run: the honest clients' mean accuracy (%) in the twin and
under attack, the difference, the worst honest client's difference, the largest share of a
round's step any node had, and what the records say. A row holds the issue's bar when the
mean is within 5 points of its twin and each honest client within 10. With `--deployment`
the attacked runs are loopback deployments (`devtools.attack_deployment`: a SuperLink and a
SuperNode process per client, through `flwr run`), their twins in process. With `--workdir`
the runs are kept there and a finished one is read, not rerun, so that a long table resumes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.bench_attacks import markdown, records_say
from devtools.attack_deployment import run_deployed
from devtools.attacks import ATTACKS, run
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_paper.cli import set_keys

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("PFEDGM_SHARED_DATA") or ROOT.parent / "shared" / "data") / "mnist"
ATTACKS_HERE = ("reversed-9", "reversed-100", "random-bound", "max-harm", "a-little-1",
                "a-little-1.5", "label-flip", "fixed-push")  # fmt: skip
HEADER = ("attack", "method", "nodes", "honest", "attacked", "difference", "worst honest client",
          "largest share", "holds", "records say")  # fmt: skip
MEAN_POINTS, CLIENT_POINTS = 5.0, 10.0  # the bar: the mean's and each honest client's


def accuracies(folder: Path) -> dict[int, float]:
    """Partition id -> its personalized test accuracy (%)."""
    rows = RunFolder(folder).read_clients()
    return {int(r["partition-id"]): float(r["accuracy"]) for r in rows}


def finished_or(folder: Path, start: Callable[[], dict]) -> dict:
    """The summary of the run in `folder`: read where it finished, else (re)started afresh."""
    if RunFolder(folder).finished:
        return RunFolder(folder).read_summary()
    shutil.rmtree(folder, ignore_errors=True)  # a run cut off mid-way starts over
    return start()


def row(
    name: str, method: str, nodes: int, workdir: Path, keys: dict, twins: dict, deployed: bool
) -> tuple:
    """One attack's row beside its honest twin (run once per method, nodes and keys)."""
    attack = ATTACKS[name]
    config = {**keys, "method": method}
    twin_key = (method, nodes, tuple(sorted({**attack.run, **config}.items())))
    if twin_key not in twins:
        digest = hashlib.sha256(repr(twin_key).encode()).hexdigest()[:8]
        folder = workdir / f"honest-{method}-{nodes}-{digest}"
        finished_or(folder, lambda: run(attack, DATA, folder, honest=True, nodes=nodes, **config))
        twins[twin_key] = accuracies(folder)
    folder = workdir / f"{name}-{method}-{nodes}{'-deployed' if deployed else ''}"
    if deployed:
        summary = finished_or(folder, lambda: run_deployed(name, DATA, folder, nodes, **config))
    else:
        summary = finished_or(folder, lambda: run(attack, DATA, folder, nodes=nodes, **config))
    attacked, honest = accuracies(folder), twins[twin_key]
    kept = [p for p in honest if p not in attack.attackers and p in attacked]
    before = sum(honest[p] for p in kept) / len(kept)
    after = sum(attacked[p] for p in kept) / len(kept)
    worst = min(attacked[p] - honest[p] for p in kept)
    share = summary.get("largest-share", {}).get("share", 0.0)
    holds = after >= before - MEAN_POINTS and worst >= -CLIENT_POINTS
    return (name, method, nodes, before, after, after - before, worst, share,
            "yes" if holds else "no", records_say(summary))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="fedavg,fedavgft,pfedgm")
    parser.add_argument("--nodes", default="3,4,6")
    parser.add_argument("--attacks", default=",".join(ATTACKS_HERE))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--deployment", action="store_true", help="attacked runs deployed")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--workdir", type=Path, help="keep the runs here; finished ones are read")
    args = parser.parse_args()
    keys, table, twins = set_keys(args.set), [], {}
    with tempfile.TemporaryDirectory(prefix="pfedgm-influence-") as scratch:
        workdir = args.workdir or scratch
        for name in args.attacks.split(","):
            for method in args.methods.split(","):
                for nodes in [int(n) for n in args.nodes.split(",")]:
                    if len(ATTACKS[name].attackers) > 1 and nodes < 6:
                        continue  # colluders: 2 of 6
                    table.append(
                        row(name, method, nodes, Path(workdir), keys, twins, args.deployment)
                    )
                    print(" | ".join(f"{v:.2f}" if isinstance(v, float) else str(v)
                                     for v in table[-1]), flush=True)  # fmt: skip
    print(markdown(table, HEADER))
    if args.markdown:
        given = [f"--{k} {getattr(args, k)}" for k in ("methods", "nodes", "attacks")
                 if getattr(args, k) != parser.get_default(k)]  # fmt: skip
        command = " ".join(["python -m benchmarks.bench_influence", *given,
                            *(f"--set {s}" for s in args.set),
                            *(["--deployment"] if args.deployment else [])])  # fmt: skip
        where = "loopback deployment" if args.deployment else "in process"
        head = (f"# Attacks on the influence bound, MNIST, per honest client, {where}\n\n"
                f"Generated by `{command}`.\n\n")  # fmt: skip
        args.markdown.write_text(head + markdown(table, HEADER))


if __name__ == "__main__":
    main()
