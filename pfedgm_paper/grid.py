"""The paper's tables as a grid of runs: columns are presets (`presets.PRESETS`), rows are
methods or ablation variants, and each (column, run, seed) is one run in its own folder.

A results folder holds `<preset>/<run>/seed<seed>/`, the run's `output-dir`. Rows that read the
same run share it: the adaptation table's NA / FA / GA rows are three metrics of the pFedGM runs
of the standard and corruption tables, the runtime table is those tables' wall times, and
pFedGM's row in the ablations is the standard pFedGM run. So asking for several tables runs
each distinct run once.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pfedgm_app.methods import METHODS
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.presets import PRESETS

from .rows import Row, Table, method_row, method_rows, variant
from .studies import (
    AGGREGATION,
    FINALISTS,
    INFLUENCE,
    LAYER_STD,
    LITERAL_STD,
    NAVIGATOR_STD,
    PHASE2,
    PRIVACY,
    PRIVACY_CLIP,
    READINGS,
    STUDY_COLUMNS,
)

PAPER_ROUNDS = 200  # "all methods are trained for 200 global communication rounds"
ALL_METHODS = method_rows(*METHODS)  # the registry's order is the paper's
DIRS = ("dir01", "dir05")
STANDARD = tuple(
    f"{d}-{a}" for d in ("emnist", "cifar10", "cifar100", "tinyimagenet") for a in DIRS
)
CORRUPTION = tuple(
    f"{d}s-{a}-{c}" for d in ("cifar10", "cifar100") for a in DIRS for c in ("50c", "100c")
)
CORRUPTED_ALL = tuple(c for c in CORRUPTION if c.endswith("100c"))


# The adaptation ablation reads one pFedGM run: NA is Phase 2's head before any fitting, the
# global navigator with the global covariance (`acc-global-cov`); FA after the fine-tuning
# (`acc-finetune`); GA after the L-BFGS biases, the method's own accuracy. The `adaptation` key
# gives each as a run's `accuracy`; reading the metrics spares two runs per cell.
ADAPTATION_ROWS = (
    Row("na", "NA", "pfedgm", {"method": "pfedgm"}, "acc-global-cov"),
    Row("fa", "FA", "pfedgm", {"method": "pfedgm"}, "acc-finetune"),
    Row("ga", "GA", "pfedgm", {"method": "pfedgm"}, "accuracy"),
)

# One Table per entry: (name, caption, columns, rows[, kind])
# fmt: off
TABLES: dict[str, Table] = {t.name: t for t in (
    Table("standard", "Average (std) test accuracy (%) on multiple datasets", STANDARD,
          ALL_METHODS),
    Table("corruption", "Average (std) test accuracy (%) on CIFAR-10S/100S", CORRUPTION,
          ALL_METHODS),
    Table("generalization", "New-client generalization on CIFAR-10 Dir(0.5)",
          ("generalization",),
          method_rows("fedavg", "fedavgft", "fedbabu", "pfedme", "lgfedavg", "fedpac",
                      "pfedfda", "pfedgm")),
    Table("moderate", "Average (std) test accuracy (%) under moderate settings",
          tuple(f"moderate-{c}" for c in STANDARD),
          method_rows("local", "fedavg", "fedavgft", "fedpac", "pfedfda", "pfedgm")),
    # The figure's methods are not legible in the paper's text: the standard table's leaders.
    Table("low-participation", "Test accuracy during training with q = 0.1",
          ("cifar10-q01", "cifar100-q01", "cifar10s-q01", "cifar100s-q01"),
          method_rows("fedavg", "fedavgft", "ditto", "fedpac", "pfedfda", "pfedgm",
                      own_run=True), "curve"),
    Table("runtime", "System runtime (min) on CIFAR-10/100 Dir(0.5)",
          ("cifar10-dir05", "cifar100-dir05"),
          method_rows("local", "fedavg", "fedavgft", "ditto", "fedper", "fedrep", "fedbabu",
                      "pfedme", "lgfedavg", "fedpac", "pfedfda", "pfedgm", own_run=True),
          "runtime"),
    Table("adaptation", "Ablation on the classifier head (NA / FA / GA)",
          STANDARD + CORRUPTION, ADAPTATION_ROWS),
    Table("objective", "Ablation on the personalized objective (NPO / WPO)", CORRUPTED_ALL,
          (variant("npo", "NPO", **{"personalized-objective": False}),
           Row("wpo", "WPO", "pfedgm", {"method": "pfedgm"}))),
    Table("decoupling", "Ablation on the shared objective and statistic extractor",
          CORRUPTED_ALL,
          (variant("gm", "G.M.", decoupling="gm"),
           variant("gm-c", "G.M. - C.", decoupling="gm-c"),
           Row("gm-d", "G.M. + D.", "pfedgm", {"method": "pfedgm"}))),
    Table("readings", "Phase 1's open readings: validation accuracy (%)", STUDY_COLUMNS,
          READINGS),
    Table("readings-test", "Phase 1's finalist readings: test accuracy (%)", STUDY_COLUMNS,
          FINALISTS),
    Table("navigator-std", "The navigator's scale at 200 rounds: validation accuracy (%)",
          ("cifar100-dir05", "cifar100-dir01"), NAVIGATOR_STD),
    Table("aggregation", "Each defence's honest cost: validation accuracy (%)",
          ("cifar10-dir05", "cifar100-dir05"), AGGREGATION),
    Table("influence", "The influence bound's c, honest cost: validation accuracy (%)",
          ("cifar10-dir05", "cifar100-dir05"), INFLUENCE),
    Table("privacy-clip", "DP's clipping norm at epsilon 4: validation accuracy (%)",
          ("cifar10-dir05",), PRIVACY_CLIP),
    Table("privacy", "Personalized accuracy (%) against epsilon (delta 1e-5), 50 rounds",
          ("cifar10-dir05",), PRIVACY),
    Table("phase2", "Phase 2's budget from a kept model: validation accuracy (%)",
          ("cifar100-dir05", "cifar100-dir01"), PHASE2),
    # The navigator's initial scale at 30 rounds (docs/notes/navigator-init.md): mu^0 from
    # N(0, 1), the default, against N(0, 1/d) (ran with d = 128 on the CIFAR cells and 512 on
    # TinyImageNet's), beside pFedFDA; each run's global model alone (`acc-global`: pFedGM's
    # navigator, pFedFDA's global Gaussian head) as a row of its own.
    Table("navigator", "The navigator's initial scale: N(0, 1) against N(0, 1/d)",
          ("cifar100-dir05", "cifar10-dir05", "cifar100-dir01", "cifar10-dir01",
           "cifar10s-dir05-100c", "tinyimagenet-dir01"),
          (variant("scaled", "pFedGM, N(0, 1/d)", **{"navigator-std": LAYER_STD}),
           method_row("pfedfda"),
           Row("global", "pFedGM's navigator alone", "pfedgm",
               {"method": "pfedgm", **LITERAL_STD}, "acc-global"),
           Row("scaled-global", "pFedGM's navigator alone, N(0, 1/d)", "pfedgm-scaled",
               {"method": "pfedgm", "navigator-std": LAYER_STD}, "acc-global"),
           Row("pfedfda-global", "pFedFDA's global head alone", "pfedfda",
               {"method": "pfedfda"}, "acc-global"),
           Row("pfedgm", "pFedGM, N(0, 1)", "pfedgm", {"method": "pfedgm", **LITERAL_STD}))),
)}
# fmt: on


@dataclass(frozen=True)
class Run:
    """One run of the grid: preset `column`, run `name`, `seed`."""

    column: str
    name: str
    seed: int
    keys: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def folder(self, out: Path) -> Path:
        return out / self.column / self.name / f"seed{self.seed}"

    def label(self) -> str:
        return f"{self.column} {self.name} seed {self.seed}"


def preset_name(column: str, offline: bool) -> str:
    return f"{column}-offline" if offline else column


def runs(tables: list[str], seeds: list[int], columns: list[str] | None = None) -> list[Run]:
    """The distinct runs the `tables` need over `seeds`, in table order, each once; `columns`
    keeps only those presets."""
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        raise ValueError(f"no table {unknown}: choose from {', '.join(TABLES)}")
    found: dict[tuple[str, str, int], Run] = {}
    for table in tables:
        t = TABLES[table]
        for column in t.columns:
            if columns and column not in columns:
                continue
            for seed in seeds:
                # the table's own row first (pFedGM, or the full method or default reading of
                # a study: the last row), so a grid stopped part-way has it in every cell
                for row in sorted(t.rows, key=lambda r: r.run != t.rows[-1].run):
                    found.setdefault((column, row.run, seed), Run(column, row.run, seed, row.keys))
    return list(found.values())


def run_config(run: Run, out: Path, rounds: int, offline: bool, extra: dict | None = None) -> dict:
    """The run-config of `run`: its preset, its row's keys, the seed (partition and training),
    the budget, its folder; `resume` when a stopped run left a checkpoint there. A tracked
    run (`tracker` in `extra`) is named after its cell; `commit` is this checkout's."""
    folder = run.folder(out)
    extra = {"commit": source_commit(), **(extra or {})}
    if extra.get("tracker", "none") != "none":
        extra.setdefault("tracker-name", f"{run.column}/{run.name}/seed{run.seed}")
    return {
        "preset": preset_name(run.column, offline),
        **run.keys,
        "seed": run.seed,
        "num-server-rounds": rounds,
        **(extra or {}),
        "output-dir": str(folder),
        "resume": RunFolder(folder).checkpoint.exists(),
    }


CHECKOUT = Path(__file__).resolve().parents[1]


def source_commit(root: Path = CHECKOUT) -> str:
    """The checkout's commit (12 hex digits), `+dirty` when tracked files changed; "" outside
    a git checkout (an installed package)."""
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=30).stdout.strip()  # fmt: skip
        changes = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=30).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+dirty" if changes.strip() else "")


def supernodes(run: Run) -> int:
    return PRESETS[run.column].num_supernodes
