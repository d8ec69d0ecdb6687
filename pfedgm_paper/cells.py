"""What a table's cell holds, read from the runs of a results folder (`grid.Run.folder`).

A cell over several seeds: the mean of the seeds' means (each weighted by client test-set size,
as `summary.json`'s `mean-accuracy`) and the mean of their stds across clients (the paper's
parenthesis: the spread between clients, not between seeds); the seeds' own spread is in the
paired differences (`paired.per_seed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pfedgm_app.protocol import wire
from pfedgm_app.records.plots import EVAL_MEAN, EVAL_STD
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.strategies.personalization_result import accuracy_stats

from .paired import PerClient
from .rows import Row


@dataclass
class Cell:
    mean: float
    std: float
    seeds: list[int]
    rounds: int
    minutes: float  # wall time, training and personalization (the paper's runtime table)
    seconds_per_round: float  # Phase 1's wall time over its rounds
    per_client: PerClient = field(repr=False)
    differences: list[str] = field(default_factory=list)  # from the paper's protocol
    source: Path | None = None  # the `--beside` folder it was read from; None: the first
    # Rounds in which every reply failed, so no client's step entered the model (a DP run's
    # noise can leave a model no client trains from), summed over seeds; and a DP run's
    # epsilon spent, the seeds' mean (below its target where rounds released nothing, as
    # before every round released).
    idle_rounds: int = 0
    epsilon: float | None = None
    seed_means: dict[int, float] = field(default_factory=dict)  # each seed's mean: their spread
    # {(seed, partition-id): training images} of the clients in per_client that record them
    train_images: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)
    # {seed: what the influence bound did to its replies}; None: the run had no bound
    bounded: dict[int, Bounded | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Bounded:
    """The influence bound's work over a run (`strategies.influence`): the replies it clipped,
    those it scaled to the pull bound, of all the replies used, at its `clip-ratio`."""

    clipped: int
    pulled: int
    replies: int
    clip_ratio: float

    @property
    def scaled(self) -> int:
        """The replies it scaled, by either bound."""
        return self.clipped + self.pulled


# What fixes a run's protocol, as config.json records it: (key, the paper's value, words)
PROTOCOL = (
    ("num-server-rounds", 200, "rounds"),
    ("local-epochs", 5, "local epochs"),
    ("pool-size", 0, "images pooled"),
)

# The local copies holding fewer images than the paper's data (../shared/data/README.md;
# tests/test_paper_render.py counts them): a run on one is another experiment, marked as such.
# dataset: (images pooled here, in the paper's data, what they are); a run pools every split
# and partitions the pool, so both counts are pooled: the paper's are its own (EMNIST 814,255,
# TinyImageNet 120,000), the local TinyImageNet pools 20,000 training and 10,000 val images.
SUBSET_IMAGES = {
    "shared:emnist": (116_323, 814_255, "EMNIST's {} images (paper {})"),
    "shared:tinyimagenet": (30_000, 120_000, "TinyImageNet's {} images (paper {})"),
}
SUBSETS = {
    dataset: words.format(f"{ours:,}", f"{paper:,}")
    for dataset, (ours, paper, words) in SUBSET_IMAGES.items()
}


def protocol_differences(config: dict, column: str) -> list[str]:
    """How the run of `config` (its config.json) departs from the paper's protocol for the
    preset `column`: clients, rounds, local epochs, pool size, a subset of the paper's data;
    [] when it does not."""
    from pfedgm_app.runconfig.presets import PRESETS

    found = []
    preset = PRESETS.get(column)
    clients = config.get("num-clients")
    if preset is not None and clients is not None and clients != preset.num_supernodes:
        found.append(f"{clients} clients (paper {preset.num_supernodes})")
    for key, paper, words in PROTOCOL:
        value = config.get(key, paper)
        if value != paper:
            shown = "all" if paper == 0 else paper
            found.append(f"{value:,} {words} (paper {shown})")
    if subset := SUBSETS.get(config.get("dataset", "")):
        found.append(subset)
    return found


# One results folder, or several searched in order (`render --beside`): a run is read from the
# first folder holding a finished seed of it, so a rerun of one row shows beside the others' runs.
Results = Path | tuple[Path, ...]


def searched(out: Results) -> tuple[Path, ...]:
    """The results folders of `out`, in the order a run is looked for in them."""
    return (out,) if isinstance(out, Path) else out


def seed_folders(out: Results, column: str, run: str) -> dict[int, Path]:
    """{seed: folder} of the finished runs (`summary.json`) of `run` in `column`."""
    for results in searched(out):
        base, found = results / column / run, {}
        for folder in sorted(base.glob("seed*")) if base.is_dir() else []:
            if RunFolder(folder).finished and folder.name[4:].isdigit():
                found[int(folder.name[4:])] = folder
        if found:
            return found
    return {}


def client_rows(folder: Path, metric: str) -> dict[int, tuple[float, int]]:
    """{partition-id: (metric in percent, test-set size)} from a run's `clients.csv`; a client
    without the metric (a failed reply) is left out."""
    return rows_of(RunFolder(folder).read_clients(), metric)


def rows_of(clients: list[dict], metric: str) -> dict[int, tuple[float, int]]:
    """`client_rows` of `clients.csv`'s rows already read."""
    return {
        int(row[wire.PARTITION_ID]): (row[metric], int(row[wire.NUM_TEST]))
        for row in clients
        if metric in row
    }


def read_cell(out: Results, column: str, row: Row) -> Cell | None:
    """The cell of `row` in `column`, over the seeds found; None when no run has finished."""
    folders = seed_folders(out, column, row.run)
    per_client: PerClient = {}
    means, stds, minutes, per_round, rounds, differences = [], [], [], [], set(), []
    idle, epsilons, seed_means, images, bounded = 0, [], {}, {}, {}
    for seed, folder in folders.items():
        stored = RunFolder(folder)
        clients = stored.read_clients()
        rows = rows_of(clients, row.metric)
        if not rows:
            continue
        images.update({
            (seed, int(c[wire.PARTITION_ID])): int(c[wire.NUM_EXAMPLES])
            for c in clients
            if row.metric in c and wire.NUM_EXAMPLES in c  # older records lack it
        })  # fmt: skip
        summary, entries = stored.read_summary(), stored.read_rounds()
        if stored.config.exists():  # a run from a kept model: its model's rounds count too
            config = stored.read_config()
            bounded[seed] = influence_bound(config, entries)
            budget = int(config.get("num-server-rounds", 0)) + int(summary.get("rounds-before", 0))
            found = protocol_differences({**config, "num-server-rounds": budget}, column)
            differences += [d for d in found if d not in differences]
        mean, std, _ = accuracy_stats([v for v, _ in rows.values()], [w for _, w in rows.values()])
        means.append(mean)
        stds.append(std)
        seed_means[seed] = mean
        minutes.append(summary.get("seconds-total", float("nan")) / 60)
        per_round.append(summary.get("seconds-per-round", float("nan")))
        rounds.add(int(summary.get("rounds", 0)) + int(summary.get("rounds-before", 0)))
        per_client.update({(seed, pid): v for pid, v in rows.items()})
        idle += len(idle_rounds(entries))
        if "epsilon" in (privacy := summary.get("privacy", {})):
            epsilons.append(float(privacy["epsilon"]))
    if not means:
        return None
    if len(rounds) > 1:
        base = next(iter(folders.values())).parent
        raise ValueError(f"{base} mixes budgets {sorted(rounds)}: one per folder")
    n = len(means)
    return Cell(
        sum(means) / n,
        sum(stds) / n,
        sorted(seed_means),
        rounds.pop(),
        sum(minutes) / n,
        sum(per_round) / n,
        per_client,
        differences,
        _beside(out, next(iter(folders.values())).parents[2]),
        idle,
        sum(epsilons) / len(epsilons) if epsilons else None,
        seed_means,
        images,
        bounded,
    )


def idle_rounds(entries: list[dict]) -> list[int]:
    """The training rounds of a run (its `rounds.jsonl` lines) in which replies came and
    every one failed."""
    return [r["round"] for r in entries if r.get("replies-dropped") and not r.get("num-clients")]


def influence_bound(config: dict, entries: list[dict]) -> Bounded | None:
    """What the influence bound did over a run (its config.json, `rounds.jsonl` lines); None
    where it had none: run before the bound existed (no `clip-ratio` recorded), with
    `clip-ratio` 0, or under DP, whose rounds clip every step to C instead (their
    `updates-clipped` counts that clip: `strategies.suspects`)."""
    entries = [r for r in entries if "dp-clipping-norm" not in r]
    if not (ratio := float(config.get("clip-ratio") or 0.0)) or not entries:
        return None
    return Bounded(
        sum(int(r.get("updates-clipped") or 0) for r in entries),
        sum(int(r.get("updates-pull-bounded") or 0) for r in entries),
        sum(int(r.get("num-clients") or 0) for r in entries),
        ratio,
    )


def _beside(out: Results, home: Path) -> Path | None:
    """`home` when it is not the first of the results folders searched, else None."""
    return None if home == searched(out)[0] else home


def curve(out: Results, column: str, run: str) -> dict[int, tuple[float, float]]:
    """{round: (personalized accuracy, std across clients)} over the seeds, from each run's
    `rounds.jsonl` (its `eval-every` rounds) and `summary.json` (the final round)."""
    by_round: dict[int, list[tuple[float, float]]] = {}
    for folder in seed_folders(out, column, run).values():
        points, stored = {}, RunFolder(folder)
        for entry in stored.read_rounds():  # none where a run was copied without its rounds
            if entry.get(EVAL_MEAN) is not None:
                points[int(entry["round"])] = (entry[EVAL_MEAN], entry.get(EVAL_STD) or 0.0)
        # the final evaluation, also where `rounds.jsonl` predates holding it
        summary = stored.read_summary()
        if summary.get("mean-accuracy") is not None:
            points[int(summary["rounds"])] = (summary["mean-accuracy"], summary["std-accuracy"])
        for r, point in points.items():
            by_round.setdefault(r, []).append(point)
    return {
        r: (sum(m for m, _ in v) / len(v), sum(s for _, s in v) / len(v))
        for r, v in sorted(by_round.items())
    }
