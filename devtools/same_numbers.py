"""Same numbers before and after a change: every method once at a tiny size, then a diff.

    PYTHONPATH=/abs/tree-before python devtools/same_numbers.py run /abs/out/before [KEY=VALUE]
    PYTHONPATH=/abs/tree-after  python devtools/same_numbers.py run /abs/out/after [KEY=VALUE]
    python devtools/same_numbers.py compare /abs/out/before /abs/out/after

`run` trains each registered method of the tree on PYTHONPATH (2 rounds, 4 MNIST clients,
1 local epoch, a 600-image pool) with the in-process driver and keeps its `clients.csv` and
`rounds.jsonl` (`KEY=VALUE` arguments, TOML values, override those keys: `fraction-train=1.0`
gives every round 4 replies, enough for the checks that need 3); `compare` prints, per
method, whether the per-client results are identical and exits 1 when any differs. A
refactor must change no number.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pfedgm_app.records.run_folder import RunFolder

TINY = {
    "num-server-rounds": 2,
    "local-epochs": 1,
    "finetune-epochs": 1,
    "personal-epochs": 1,
    "fedrep-refit-epochs": 1,
    "lbfgs-cycles": 1,
    "pfedme-inner-steps": 1,
    "pool-size": 600,
    "fraction-train": 0.5,
    "client-threads": 1,
    "seed": 0,
}


def run(out: Path, overrides: dict | None = None) -> None:
    from pfedgm_app.methods import METHODS
    from pfedgm_engine.inprocess import run_inprocess

    data = Path(__file__).resolve().parents[2] / "shared/data/mnist"
    for method in METHODS:
        target = out / method
        if not RunFolder(target).clients.exists():
            cfg = {**TINY, **(overrides or {}), "method": method, "dataset": str(data),
                   "output-dir": str(target)}  # fmt: skip
            run_inprocess(cfg, 4)
        print(method, "done", flush=True)


def rows(folder: RunFolder) -> list[dict[str, float]]:
    """clients.csv without its timing columns (seconds differ from run to run), accuracies in
    percent whichever format version wrote it."""
    return [
        {k: v for k, v in r.items() if not k.startswith("seconds")} for r in folder.read_clients()
    ]


def compare(before: Path, after: Path) -> int:
    differ = 0
    for folder in sorted(p for p in before.iterdir() if RunFolder(p).clients.exists()):
        ours, theirs = RunFolder(folder), RunFolder(after / folder.name)
        same = theirs.clients.exists() and rows(ours) == rows(theirs)
        differ += not same
        print(f"{folder.name:10s} {'identical' if same else 'DIFFERENT'}")
    return 1 if differ else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"] and len(sys.argv) >= 3 and all("=" in a for a in sys.argv[3:]):
        from pfedgm_paper.cli import set_keys

        run(Path(sys.argv[2]).resolve(), set_keys(sys.argv[3:]))
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
