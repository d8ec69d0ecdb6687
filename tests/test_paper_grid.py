"""The paper's grid (`pfedgm_paper`): which runs a table needs and their run-configs, a tiny
grid run through the engines, a finished run skipped, and bad input refused in one line."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from pfedgm_app.methods import METHODS
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.presets import PRESETS
from pfedgm_paper import cli, grid, render
from pfedgm_paper.grid import TABLES, Run, runs
from pfedgm_paper.runner import Engine, run_grid

ROOT = Path(__file__).resolve().parents[1]


def test_every_column_is_a_preset_and_every_row_a_method_or_its_variant():
    for table in TABLES.values():
        assert all(column in PRESETS for column in table.columns), table.name
        for row in table.rows:
            assert row.keys["method"] in METHODS
            assert row.run == row.keys["method"] or row.run.startswith(row.keys["method"] + "-")


def test_rows_reading_one_run_share_it_across_tables():
    alone = runs(["standard"], [0])
    shared = runs(["standard", "adaptation", "runtime"], [0])
    extra = {(r.column, r.name) for r in shared} - {(r.column, r.name) for r in alone}
    # adaptation adds the corruption columns' pFedGM runs; runtime only FedAvg's own runs
    # (its wall time: the standard table's FedAvg reads FedAvgFT's runs, `rows.RUNS_AS`)
    assert extra == {(c, "pfedgm") for c in grid.CORRUPTION} | {
        (c, "fedavg") for c in TABLES["runtime"].columns
    }
    assert "fedavg" not in {r.name for r in alone}
    assert len(shared) == len({(r.column, r.name, r.seed) for r in shared})


def test_ablation_runs_are_pfedgm_with_the_ablation_key():
    ablations = {r.name: r.keys for r in runs(["objective", "decoupling"], [0])}
    assert ablations["pfedgm-npo"] == {"method": "pfedgm", "personalized-objective": False}
    assert ablations["pfedgm-gm"] == {"method": "pfedgm", "decoupling": "gm"}
    assert ablations["pfedgm-gm-c"] == {"method": "pfedgm", "decoupling": "gm-c"}
    assert ablations["pfedgm"] == {"method": "pfedgm"}  # WPO and G.M. + D.: pFedGM itself


def test_run_config_names_the_preset_seed_budget_and_resumes_a_stopped_run(tmp_path):
    run = Run("cifar10-dir05", "pfedgm", 2, {"method": "pfedgm"})
    cfg = grid.run_config(run, tmp_path, 50, offline=True)
    assert cfg["preset"] == "cifar10-dir05-offline" and cfg["seed"] == 2
    assert cfg["num-server-rounds"] == 50 and cfg["resume"] is False
    assert cfg["output-dir"] == str(tmp_path / "cifar10-dir05/pfedgm/seed2")
    (tmp_path / "cifar10-dir05/pfedgm/seed2").mkdir(parents=True)
    RunFolder(tmp_path / "cifar10-dir05/pfedgm/seed2").checkpoint.write_bytes(b"")
    assert grid.run_config(run, tmp_path, 50, offline=True)["resume"] is True
    assert "tracker-name" not in cfg  # untracked: the config holds nothing of it
    assert cfg["commit"] == grid.source_commit() and cfg["commit"][:12].isalnum()
    tracked = grid.run_config(run, tmp_path, 50, True, {"tracker": "wandb", "tracker-group": "t"})
    assert tracked["tracker-name"] == "cifar10-dir05/pfedgm/seed2"
    assert tracked["tracker-group"] == "t"


def test_a_folder_holding_another_budget_is_refused_before_any_run(tmp_path, capsys):
    folder = tmp_path / "cifar10-dir05/pfedgm/seed0"
    folder.mkdir(parents=True)
    RunFolder(folder).write_config({"num-server-rounds": 30})
    code = cli.main(["run", "standard", "--out", str(tmp_path), "--rounds", "200",
                     "--columns", "cifar10-dir05", "--methods", "pfedgm"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "30 rounds, not 200" in err[0]
    assert sorted(p.name for p in folder.iterdir()) == [RunFolder(folder).config.name]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "standart", "--out", "/tmp/x"], "no table ['standart']"),
        (["run", "standard", "--out", "relative"], "absolute"),
        (["run", "standard", "--out", "/tmp/x", "--methods", "fedavgg"], "no method"),
        (["run", "standard", "--out", "/tmp/x", "--columns", "cifar10-dir5"], "no run matches"),
        (["run", "navigator-std", "--out", "/tmp/x", "--runs", "pfedgm-val-std-1"], "no run "),
        (["render", "--out", "/tmp/x", "--tables", "tsne"], "no table ['tsne']"),
    ],
)
def test_bad_input_is_one_line_naming_what_to_fix(argv, says, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_runs_keeps_the_named_runs_of_every_column(tmp_path, capsys):
    argv = ["run", "navigator-std", "--out", str(tmp_path), "--dry-run", "--runs",
            "pfedgm-val-std-layer,pfedgm-val-default"]  # fmt: skip
    assert cli.main(argv) == 0
    listed = [tuple(line.split()[1:3]) for line in capsys.readouterr().out.splitlines()]
    assert sorted(listed) == [
        (column, name)
        for column in ("cifar100-dir01", "cifar100-dir05")
        for name in ("pfedgm-val-default", "pfedgm-val-std-layer")
    ]


def test_a_missing_flwr_command_is_one_line_before_any_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    argv = ["run", "standard", "--out", str(tmp_path / "out"), "--columns", "cifar10-dir05"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "flwr: no such command on PATH" in err[0] and "inprocess" in err[0]
    assert not (tmp_path / "out").exists()


TINY = ["--offline", "--clients", "4", "--rounds", "1", "--set", "pool-size=1000",
        "--set", "local-epochs=1", "--set", "client-threads=1"]  # fmt: skip


@pytest.mark.slow
def test_a_tiny_grid_runs_renders_and_skips_what_is_done(cifar10, tmp_path):
    todo = runs(["standard"], [0, 1], ["cifar10-dir05"])
    todo = [r for r in todo if r.name in ("pfedgm", "fedavgft")]  # FedAvg's row: fedavgft's
    keys = {"pool-size": 1000, "local-epochs": 1, "client-threads": 1}
    engine = Engine("inprocess", app_dir=ROOT)
    assert run_grid(todo, tmp_path, 1, engine, offline=True, extra=keys, clients=4) == []
    folders = {r: RunFolder(r.folder(tmp_path)) for r in todo}
    summaries = {(r.name, r.seed): folder.read_summary() for r, folder in folders.items()}
    stamps = {r: folder.summary.stat().st_mtime_ns for r, folder in folders.items()}
    assert run_grid(todo, tmp_path, 1, engine, offline=True, extra=keys, clients=4) == []
    assert stamps == {r: folder.summary.stat().st_mtime_ns for r, folder in folders.items()}
    rows = list(csv.DictReader(render.csv_text(tmp_path, TABLES["standard"]).splitlines()))
    for name, run, metric in (("pfedgm", "pfedgm", None), ("fedavgft", "fedavgft", None),
                              ("fedavg", "fedavgft", "acc-global")):  # fmt: skip
        row = next(r for r in rows if r["row"] == name and r["column"] == "cifar10-dir05")
        means = [summaries[run, seed]["mean-accuracy"] for seed in (0, 1)]
        if metric:
            means = [summaries[run, seed]["ablation-mean-accuracy"][metric] for seed in (0, 1)]
        assert float(row["mean"]) == pytest.approx(sum(means) / 2, abs=1e-3)
        assert row["seeds"] == "0 1" and row["rounds"] == "1"


@pytest.mark.slow
def test_the_console_script_runs_a_cell_through_flwr(cifar10, flower_env, tmp_path):
    env = {**flower_env}
    script = str(Path(sys.executable).parent / "pfedgm-paper")  # the installed console script
    argv = [script, "run", "standard", "--out", str(tmp_path), "--columns",
            "cifar10-dir05", "--methods", "fedavg", *TINY]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    # FedAvg's cell is FedAvgFT's run (`rows.RUNS_AS`): asking for FedAvg runs it
    assert RunFolder(tmp_path / "cifar10-dir05/fedavgft/seed0").read_summary()["rounds"] == 1
    assert "1/1 runs done" in done.stdout
