"""`pfedgm-paper`: run the paper's tables as a grid, then render them from the results.

    pfedgm-paper list                                   # the tables, their cells and runs
    pfedgm-paper run standard --out /abs/paper --rounds 200 --seeds 0,1,2 --offline
    pfedgm-paper run objective,decoupling --out /abs/paper --columns cifar10s-dir05-100c
    pfedgm-paper collect --out /abs/paper --to results/paper/runs   # records and models
    pfedgm-paper collect --out /abs/paper --to results/paper/base --skip pfedgm  # the others
    pfedgm-paper render --out results/paper/runs --to docs/results/rendered
    pfedgm-paper dynamics /abs/paper/cifar100-dir05/pfedgm/seed0 --to dynamics.png

`run` runs each missing run (resumably: `runner`) and prints one progress line; `collect` copies
what the renderings read of each finished run and its final global model (safetensors, which a
later Phase 2 study starts from: `initial-model`; no checkpoints) to a folder that can be
committed; `render` writes each table as Markdown and CSV (`render`) and the figures (`figures`)
from what has finished.
"""

from __future__ import annotations

import argparse
import sys
from fnmatch import fnmatch
from pathlib import Path

from pfedgm_app.methods import METHODS
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_cli import APP_DIR

from . import records
from .grid import PAPER_ROUNDS, TABLES, runs
from .rows import read_as
from .runner import ENGINES, Engine, run_grid


def _names(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _seeds(text: str) -> list[int]:
    try:
        return [int(s) for s in _names(text)]
    except ValueError:
        raise SystemExit(f"--seeds takes integers separated by commas, got {text!r}") from None


def set_keys(pairs: list[str]) -> dict:
    """["corruption=100C", "lambda=0.5"] (`--set`, run-config keys) -> {"corruption": "100C",
    "lambda": 0.5}: each value as TOML reads it, else the text."""
    import tomllib

    keys = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
        try:
            keys[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            keys[key] = value
    return keys


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pfedgm-paper", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the tables and the runs each needs")
    run = sub.add_parser("run", help="run every missing run of the tables")
    run.add_argument("tables", help=f"comma-separated: {', '.join(TABLES)}")
    run.add_argument("--out", type=Path, required=True, help="the results folder (absolute)")
    run.add_argument("--rounds", type=int, default=PAPER_ROUNDS, help="the budget (paper: 200)")
    run.add_argument("--seeds", default="0", help="partition and training seeds, e.g. 0,1,2")
    run.add_argument("--columns", default="", help="only these presets (comma-separated)")
    run.add_argument("--methods", default="", help="only the runs of these methods")
    run.add_argument("--runs", default="", help="only these runs, by name (see --dry-run)")
    run.add_argument("--offline", action="store_true", help="the presets' -offline twins")
    run.add_argument("--clients", type=int, help="SuperNodes per run (default: the preset's)")
    run.add_argument("--engine", choices=ENGINES, default="flwr")
    run.add_argument("--workers", type=int, default=1, help="inprocess: ClientApps at a time")
    run.add_argument("--cpus", type=float, default=1, help="flwr: CPUs per ClientApp")
    run.add_argument("--gpus", type=float, default=0, help="flwr: GPU share per ClientApp")
    run.add_argument("--app", type=Path, default=APP_DIR, help="the app's project folder")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--dry-run", action="store_true", help="list the runs and their state")
    collect = sub.add_parser("collect", help="copy finished runs' records and global models")
    collect.add_argument("--out", type=Path, required=True, help="the results folder")
    collect.add_argument("--to", type=Path, required=True, help="where the copies go")
    collect.add_argument("--runs", default="*", help="run names to copy, glob patterns "
                         "separated by commas (e.g. pfedgm); all by default")  # fmt: skip
    collect.add_argument("--skip", default="", help="run names to leave, the same way "
                         "(e.g. pfedgm: the baselines of a grid go to another folder)")  # fmt: skip
    tsne = sub.add_parser("tsne", help="the t-SNE figure of one finished run's folder")
    tsne.add_argument("run_dir", type=Path, help="a run's output-dir (with its global model)")
    tsne.add_argument("--to", type=Path, required=True, help="the PNG to write")
    dynamics = sub.add_parser("dynamics", help="Phase 1's diagnostics of a pFedGM run per round")
    dynamics.add_argument(
        "run_dirs", type=Path, nargs="+", help="pFedGM runs' output-dirs, overlaid"
    )
    dynamics.add_argument(
        "--beside",
        type=Path,
        action="append",
        default=[],
        help="another run whose accuracy curve joins the first panel",
    )
    dynamics.add_argument("--to", type=Path, help="the PNG to write")
    dynamics.add_argument("--table", type=Path, help="the Markdown table to write")
    dynamics.add_argument(
        "--at", help="the table's rounds, comma-separated (default: the evaluated rounds)"
    )
    dynamics.add_argument(
        "--dim", type=int, default=128, help="z's dimension, for the table's relative spread"
    )
    paired = sub.add_parser("paired", help="two finished runs' per-client difference, A - B")
    paired.add_argument("run_a", type=Path, help="run A's output-dir")
    paired.add_argument("run_b", type=Path, help="run B's output-dir (the same clients)")
    paired.add_argument("--metric", default="accuracy", help="clients.csv's column")
    render = sub.add_parser("render", help="tables (Markdown, CSV) and figures from results")
    render.add_argument("--out", type=Path, required=True, help="the results folder")
    render.add_argument(
        "--beside",
        type=Path,
        action="append",
        default=[],
        help="another results folder, for the runs OUT lacks (repeatable; OUT's runs first)",
    )
    render.add_argument("--to", type=Path, help="where to write (default: OUT/rendered)")
    render.add_argument("--tables", default=",".join(TABLES))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        commands = {
            "list": _list,
            "run": _run,
            "collect": _collect,
            "render": _render,
            "tsne": _tsne,
            "dynamics": _dynamics,
            "paired": _paired,
        }
        return commands[args.command](args)
    except ValueError as exc:  # bad input: one line, before any run starts
        print(f"pfedgm-paper: {exc}", file=sys.stderr)
        return 2


def _list(args) -> int:
    for table in TABLES.values():
        count = len(runs([table.name], [0]))
        print(
            f"{table.name}: {table.caption}; {len(table.columns)} columns x "
            f"{len(table.rows)} rows, {count} runs per seed"
        )
        print(f"    columns: {', '.join(table.columns)}")
    return 0


def _known(option: str, names: list[str], known) -> list[str]:
    """`names` when each is in `known`; else one line naming the others and the choices."""
    if unknown := [n for n in names if n not in known]:
        raise ValueError(f"{option}: no {option[2:-1]} {unknown}; choose from {', '.join(known)}")
    return names


def _run(args) -> int:
    methods = _known("--methods", _names(args.methods), METHODS)
    if not args.out.is_absolute():
        raise ValueError(f"--out {args.out}: give an absolute path (the app runs elsewhere)")
    todo = runs(_names(args.tables), _seeds(args.seeds), _names(args.columns))
    if methods:  # FedAvg's cells come from FedAvgFT's runs (`read_as`): asking for one runs it
        methods += [read_as(m)[0] for m in methods]
        todo = [r for r in todo if r.keys.get("method") in methods]
    if not todo:
        raise ValueError("no run matches these tables, columns and methods")
    if names := _names(args.runs):
        _known("--runs", names, sorted({r.name for r in todo}))
        todo = [r for r in todo if r.name in names]
    if args.dry_run:
        for run in todo:
            folder = run.folder(args.out)
            found = RunFolder(folder)
            state = "done" if found.finished else "stopped" if found.stopped else "missing"
            print(f"{state:8} {run.label()}  {folder}")
        return 0
    offline = {"HF_HUB_OFFLINE": "1"} if args.offline else {}  # a SuperLink started now: no hub
    engine = Engine(args.engine, args.workers, args.cpus, args.gpus, args.app.resolve(), offline)
    extra = set_keys(args.set)
    if extra.get("tracker", "none") != "none":  # a tracked grid's runs: one group per table
        extra.setdefault("tracker-group", args.tables)
    failures = run_grid(
        todo, args.out, args.rounds, engine, args.offline, extra, clients=args.clients
    )
    for run, status in failures:
        print(f"failed: {run.label()}: {status}", file=sys.stderr)
    return 1 if failures else 0


def _collect(args) -> int:
    if not args.out.is_dir():
        raise ValueError(f"--out {args.out}: no such folder")
    count = models = 0
    runs, skip = _names(args.runs), _names(args.skip)
    for folder in map(RunFolder, sorted(args.out.glob("*/*/seed*"))):
        run = folder.path.parent.name
        chosen = any(fnmatch(run, p) for p in runs) and not any(fnmatch(run, p) for p in skip)
        if folder.finished and chosen:
            name = folder.path.relative_to(args.out)
            models += records.copy_results(folder, args.to / name, str(name))
            count += 1
    print(f"{count} finished runs copied to {args.to}, {models} with their global model")
    return 0


def _tsne(args) -> int:
    from .tsne import tsne_figure

    print(tsne_figure(args.run_dir, args.to))
    return 0


def _dynamics(args) -> int:
    from .dynamics import dynamics_figure, dynamics_table

    if not (args.to or args.table):
        raise ValueError("dynamics: give --to (the figure), --table (the table) or both")
    if args.at is not None and not all(r.strip().isdigit() for r in args.at.split(",")):
        raise ValueError(f"--at {args.at}: give round numbers, comma-separated, e.g. 50,200")
    if args.table:
        at = [int(r) for r in args.at.split(",")] if args.at else None
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(dynamics_table(args.run_dirs, at, args.dim))
        print(args.table)
    if args.to:
        print(dynamics_figure(args.run_dirs, args.to, args.beside))
    return 0


def _paired(args) -> int:
    from pfedgm_app.strategies.personalization_result import accuracy_stats

    from .cells import client_rows
    from .paired import paired_gap

    rows = {}
    for run in (args.run_a, args.run_b):
        if not RunFolder(run).finished:
            raise ValueError(f"{run}: not a finished run's output-dir (no summary.json)")
        rows[run] = client_rows(run, args.metric)
        if not rows[run]:
            raise ValueError(f"{run}: its clients.csv has no column {args.metric!r}")
    a, b = ({(0, pid): v for pid, v in rows[run].items()} for run in (args.run_a, args.run_b))
    if (gap := paired_gap(a, b)) is None:
        raise ValueError(f"{args.run_a} and {args.run_b} share no client: runs of one partition")
    for name, run in (("A", args.run_a), ("B", args.run_b)):
        values = list(rows[run].values())
        mean, std, _ = accuracy_stats([v for v, _ in values], [w for _, w in values])
        print(f"{name}: {mean:.2f} ({std:.1f}) over {len(rows[run])} clients  {run}")
    print(f"A - B per client: {gap.text()} over {gap.pairs} clients")
    return 0


def _render(args) -> int:
    from .figures import figures
    from .render import render

    tables = _known("--tables", _names(args.tables), TABLES)
    for folder in (args.out, *args.beside):
        if not folder.is_dir():
            raise ValueError(f"{folder}: no such results folder")
    out = (args.out, *args.beside)
    to = args.to or args.out / "rendered"
    for path in render(out, to, tables) + figures(out, to / "figures", tables):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
