"""The paper's grid (`pfedgm_paper`): which runs a table needs, how a cell and a paired
difference are computed from run folders, a tiny grid run and rendered through the engines, a
finished run skipped and a stopped one resumed, and bad input refused in one line."""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import migrate_records
from pfedgm_app.methods import METHODS
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import AGGREGATIONS
from pfedgm_app.runconfig.presets import PRESETS
from pfedgm_paper import cli, grid, render
from pfedgm_paper.cells import curve, read_cell
from pfedgm_paper.grid import TABLES, Run, runs
from pfedgm_paper.published import PUBLISHED
from pfedgm_paper.runner import Engine, run_grid
from pfedgm_paper.studies import VALIDATION

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


def _fake_run(out: Path, column: str, run: str, seed: int, accuracies: list[float],
              rounds: int = 3, minutes: float = 1.0, version: int = 2,
              per_round: float = 10.0) -> RunFolder:  # fmt: skip
    """A finished run's folder: clients.csv (partition i has test size 10 + i; `accuracies` as
    the clients reply them, fractions) and summary, in format `version` (1: as records were
    written before format versions, fractions and snake_case, no format-version)."""
    folder = RunFolder(out / column / run / f"seed{seed}")
    folder.path.mkdir(parents=True)
    rows = [{"partition-id": i, "accuracy": acc, "acc-finetune": acc / 2, "num-test": 10 + i}
            for i, acc in enumerate(accuracies)]  # fmt: skip
    if version == 2:
        folder.write_clients(rows)
        folder.write_summary(
            {"rounds": rounds, "seconds-total": 60 * minutes, "seconds-per-round": per_round}
        )
        return folder
    with folder.clients.open("w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    folder.summary.write_text(
        json.dumps(
            {"rounds": rounds, "seconds_total": 60 * minutes, "seconds_per_round": per_round}
        )
    )
    return folder


def test_a_cell_is_the_seeds_mean_of_test_size_weighted_means_and_stds(tmp_path):
    _fake_run(tmp_path, "cifar10-dir05", "pfedgm", 0, [0.5, 1.0])
    _fake_run(tmp_path, "cifar10-dir05", "pfedgm", 1, [0.2, 0.4])
    cell = read_cell(tmp_path, "cifar10-dir05", grid.method_row("pfedgm"))
    seed0 = (50 * 10 + 100 * 11) / 21
    seed1 = (20 * 10 + 40 * 11) / 21
    assert cell.mean == pytest.approx((seed0 + seed1) / 2)
    assert cell.std == pytest.approx((25 + 10) / 2)  # population std of two values: half the gap
    assert cell.seeds == [0, 1] and cell.rounds == 3
    fa = read_cell(tmp_path, "cifar10-dir05", grid.ADAPTATION_ROWS[1])  # acc-finetune
    assert fa.mean == pytest.approx(cell.mean / 2)


def test_a_run_from_a_kept_model_counts_the_models_rounds(tmp_path):
    """Phase 2 alone (0 rounds) from a 200-round model: a cell of 200 rounds, within the
    paper's protocol; without rounds-before it is a 0-round departure."""
    folder = _fake_run(tmp_path, "cifar10-dir05", "pfedgm", 0, [0.5], rounds=0)
    folder.write_config({"num-server-rounds": 0, "local-epochs": 5, "pool-size": 0})
    bare = read_cell(tmp_path, "cifar10-dir05", grid.method_row("pfedgm"))
    assert bare.rounds == 0 and bare.differences == ["0 rounds (paper 200)"]
    folder.write_summary({**folder.read_summary(), "rounds-before": 200})
    kept = read_cell(tmp_path, "cifar10-dir05", grid.method_row("pfedgm"))
    assert kept.rounds == 200 and kept.differences == []


def test_a_version_1_run_rewritten_renders_as_its_version_2_twin(tmp_path):
    """A record of format version 1 (as results/ held before `devtools.migrate_records`),
    rewritten, gives the numbers a run of today writes, to the last digit."""
    for version in (1, 2):
        out = tmp_path / f"v{version}"
        _fake_run(out, "cifar10-dir05", "pfedgm", 0, [0.8123456789, 0.6, 0.9], version=version)
        _fake_run(out, "cifar10-dir05", "fedavg", 0, [0.5, 0.7, 0.4], minutes=2.0,
                  version=version)  # fmt: skip
    assert migrate_records.main([str(tmp_path / "v1")]) == 0
    for table in (TABLES["standard"], TABLES["adaptation"], TABLES["runtime"]):
        assert render.csv_text(tmp_path / "v1", table) == render.csv_text(tmp_path / "v2", table)
        assert render.markdown(tmp_path / "v1", table) == render.markdown(tmp_path / "v2", table)


def test_rendered_table_bolds_the_best_shows_the_paper_and_pairs_clients(tmp_path):
    _fake_run(tmp_path, "cifar10-dir05", "pfedgm", 0, [0.8, 0.6, 0.9])
    _fake_run(tmp_path, "cifar10-dir05", "fedavgft", 0, [0.5, 0.7, 0.4])
    table = TABLES["standard"]
    text = render.markdown(tmp_path, table)
    pfedgm = next(line for line in text.splitlines() if line.startswith("| pFedGM |"))
    fedavg = next(line for line in text.splitlines() if line.startswith("| FedAvgFT |"))
    mean = (80 * 10 + 60 * 11 + 90 * 12) / 33
    assert f"**{mean:.2f} (" in pfedgm and "**" not in fedavg
    assert f"paper {PUBLISHED['standard']['pfedgm']['cifar10-dir05'][0]:.2f}" in pfedgm
    # pFedGM - FedAvgFT per client: +30, -10, +50 with weights 10, 11, 12
    gap = (30 * 10 - 10 * 11 + 50 * 12) / 33
    se = math.sqrt(sum((w * (d - gap)) ** 2 for d, w in ((30, 10), (-10, 11), (50, 12)))) / 33
    paired = [line for line in text.splitlines() if line.startswith("| FedAvgFT |")][-1]
    assert f"{gap:+.2f} (se {se:.2f}, 2 up / 1 down)" in paired
    rows = list(csv.DictReader(render.csv_text(tmp_path, table).splitlines()))
    fedavg_row = next(r for r in rows if r["row"] == "fedavgft" and r["column"] == "cifar10-dir05")
    assert float(fedavg_row["gap_vs_ours"]) == pytest.approx(gap)
    assert (fedavg_row["wins"], fedavg_row["losses"]) == ("2", "1")


def test_over_two_seeds_a_cell_shows_each_seeds_mean_and_a_gap_each_seeds_and_the_papers(
    tmp_path,
):
    """The verdict over seeds: each cell's seed-to-seed spread (each seed's mean), and in the
    paired table each seed's gap and the paper's gap between its two means, beside ours."""
    for seed, (mine, theirs) in enumerate((([0.8, 0.6], [0.5, 0.7]), ([0.9, 0.7], [0.4, 0.6]))):
        _fake_run(tmp_path, "cifar10-dir05", "pfedgm", seed, mine)
        _fake_run(tmp_path, "cifar10-dir05", "fedpac", seed, theirs)
    text = render.markdown(tmp_path, TABLES["standard"]).splitlines()
    seed0, seed1 = (80 * 10 + 60 * 11) / 21, (90 * 10 + 70 * 11) / 21
    pfedgm = next(line for line in text if line.startswith("| pFedGM |"))
    assert f"**{(seed0 + seed1) / 2:.2f} (" in pfedgm
    assert f"<br>seeds: {seed0:.2f}, {seed1:.2f}<br>paper " in pfedgm
    paper = PUBLISHED["standard"]
    gap = paper["pfedgm"]["cifar10-dir05"][0] - paper["fedpac"]["cifar10-dir05"][0]
    paired = [line for line in text if line.startswith("| FedPAC |")][-1]
    each = ((80 - 50) * 10 + (60 - 70) * 11) / 21, ((90 - 40) * 10 + (70 - 60) * 11) / 21
    assert paired.endswith(f"<br>seeds: {each[0]:+.2f}, {each[1]:+.2f}<br>paper {gap:+.2f} |")


def test_fedavgs_cell_is_fedavgfts_run_before_its_fine_tuning_and_the_table_says_so(tmp_path):
    folder = _fake_run(tmp_path, "cifar10-dir05", "fedavgft", 0, [0.8, 0.6])
    folder.write_clients([{"partition-id": i, "accuracy": a, "acc-global": g, "num-test": 10}
                          for i, (a, g) in enumerate(((0.8, 0.5), (0.6, 0.3)))])  # fmt: skip
    text = render.markdown(tmp_path, TABLES["standard"])
    assert "| FedAvg | 40.00 (10.0)<br>" in text and "| FedAvgFT | **70.00 (10.0)**<br>" in text
    assert "FedAvg: read from the `fedavgft` runs' `acc-global`." in text.splitlines()


def test_render_beside_reads_a_run_from_out_first_and_the_rest_from_beside(tmp_path, capsys):
    """A rerun of pFedGM alone (`--out`) tabled beside the baselines of an earlier grid
    (`--beside`): pFedGM's cell and pairs from the rerun, FedAvgFT's from the earlier folder."""
    rerun, earlier = tmp_path / "rerun", tmp_path / "earlier"
    _fake_run(rerun, "cifar10-dir05", "pfedgm", 0, [0.9, 0.9, 0.9])
    _fake_run(earlier, "cifar10-dir05", "pfedgm", 0, [0.1, 0.1, 0.1])
    _fake_run(earlier, "cifar10-dir05", "fedavgft", 0, [0.5, 0.5, 0.5])
    to = tmp_path / "to"
    argv = ["render", "--out", str(rerun), "--beside", str(earlier), "--to", str(to)]
    assert cli.main([*argv, "--tables", "standard"]) == 0
    text = (to / "standard.md").read_text()
    assert "| pFedGM | **90.00 (0.0)**<br>" in text and "| FedAvgFT | 50.00 (0.0) ‡<br>" in text
    assert f"‡ read from {earlier} (`--beside`)." in text.splitlines()
    assert "+40.00 (se 0.00, 3 up / 0 down)" in text
    alone = render.markdown(earlier, TABLES["standard"])  # one folder: nothing marked
    assert "| FedAvgFT | **50.00 (0.0)**<br>" in alone and "‡" not in alone
    missing = tmp_path / "missing"
    assert cli.main([*argv[:3], "--beside", str(missing), "--tables", "standard"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith(f"{missing}: no such results folder")


def test_a_cell_of_another_protocol_is_marked_and_never_bold(tmp_path):
    """A 4-client, 4,000-image, 1-round run beside the paper's figure: the cell says so (†
    and a line naming each difference) and is not set in bold; the paper's protocol is not."""
    folder = _fake_run(tmp_path, "cifar10-dir05", "pfedgm", 0, [0.3, 0.2])
    config = {"num-clients": 4, "pool-size": 4000, "num-server-rounds": 1, "local-epochs": 5}
    folder.write_config(config)
    text = render.markdown(tmp_path, TABLES["standard"])
    pfedgm = next(line for line in text.splitlines() if line.startswith("| pFedGM |"))
    assert "†" in pfedgm and "**" not in pfedgm
    note = next(line for line in text.splitlines() if line.startswith("† cifar10-dir05"))
    for says in ("4 clients (paper 100)", "4,000 images pooled (paper all)", "1 rounds (paper"):
        assert says in note
    paper = {"num-clients": 100, "pool-size": 0, "num-server-rounds": 200, "local-epochs": 5}
    folder.write_config(paper)
    assert "†" not in render.markdown(tmp_path, TABLES["standard"])


def test_a_cell_whose_rounds_had_every_reply_fail_is_marked_with_the_epsilon_spent(tmp_path):
    """Rounds with replies and none used (the model without a client's step): the cell gets
    § and a line with their count and a DP run's epsilon spent; a round of Phase 2 alone (no
    reply counted) and a run that used its replies get none."""
    row = TABLES["privacy-clip"].rows[0]
    folder = _fake_run(tmp_path, "cifar10-dir05", row.run, 0, [0.3, 0.2], rounds=3)
    folder.write_rounds([{"round": 1, "num-clients": 30, "replies-dropped": 0},
                         {"round": 2, "replies-dropped": 30}, {"round": 3, "replies-dropped": 30},
                         {"round": 4, "personalized-accuracy": 30.0}])  # fmt: skip
    folder.write_summary({**folder.read_summary(), "privacy": {"epsilon": 1.5}})
    text = render.markdown(tmp_path, TABLES["privacy-clip"])
    marked = next(line for line in text.splitlines() if line.startswith(f"| {row.label} |"))
    assert "§" in marked
    assert f"§ {row.label}, cifar10-dir05: every reply failed in 2 of 3 rounds" in text
    assert "epsilon 1.50 spent" in text
    folder.write_rounds([{"round": r, "num-clients": 30, "replies-dropped": 1} for r in (1, 2, 3)])
    assert "§" not in render.markdown(tmp_path, TABLES["privacy-clip"])


def test_a_run_on_a_subset_of_the_papers_data_is_marked_with_the_counts_the_data_holds(tmp_path):
    """The local EMNIST and TinyImageNet copies hold fewer images than the paper's: a cell
    from one is marked (†, never bold) with the counts, which are the copies' own."""
    from pfedgm_paper.cells import SUBSETS

    folder = _fake_run(tmp_path, "emnist-dir01", "pfedgm", 0, [0.9, 0.8])
    folder.write_config({"num-clients": 1000, "num-server-rounds": 200, "dataset": "shared:emnist"})
    text = render.markdown(tmp_path, TABLES["standard"])
    pfedgm = next(line for line in text.splitlines() if line.startswith("| pFedGM |"))
    assert "†" in pfedgm and "**" not in pfedgm
    assert f"† emnist-dir01: another protocol than the paper's: {SUBSETS['shared:emnist']}." in text
    pq = pytest.importorskip("pyarrow.parquet")
    sizes = {}
    for name in ("emnist", "tinyimagenet"):
        files = {
            f: ROOT.parent / "shared" / "data" / name / f"{f}.parquet" for f in ("train", "test")
        }
        if not all(path.exists() for path in files.values()):
            pytest.skip("../shared/data is not here")
        sizes[name] = {f: pq.read_metadata(path).num_rows for f, path in files.items()}
    assert f"{sum(sizes['emnist'].values()):,} images" in SUBSETS["shared:emnist"]  # pooled
    assert SUBSETS["shared:tinyimagenet"].startswith(f"{sizes['tinyimagenet']['train']:,} ")


def test_runtime_is_minutes_and_a_rounds_ratio_to_fedavgs(tmp_path):
    _fake_run(tmp_path, "cifar10-dir05", "fedavg", 0, [0.5], minutes=2.0, per_round=8.0)
    _fake_run(tmp_path, "cifar10-dir05", "pfedgm", 0, [0.5], minutes=3.0, per_round=10.0)
    text = render.markdown(tmp_path, TABLES["runtime"])
    assert "3.0 min, 10.0 s a round (1.25x)<br>paper 81.75 (1.26x)" in text
    assert {"local", "fedavgft"} <= {row.name for row in TABLES["runtime"].rows}  # every method
    assert "10.00" in render.csv_text(tmp_path, TABLES["runtime"])
    assert "each cell: wall minutes" in text and "test size" not in text


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


def test_a_curve_holds_the_evaluated_rounds_and_the_final_one_over_seeds(tmp_path):
    for seed, (mid, final) in enumerate([(40.0, 50.0), (44.0, 54.0)]):
        folder = _fake_run(tmp_path, "cifar10-q01", "pfedgm", seed, [0.5])
        rows = [{"round": 1}, {"round": 2, "personalized-accuracy": mid, "personalized-std": 2.0}]
        folder.write_rounds(rows)
        folder.write_summary({"rounds": 3, "mean-accuracy": final, "std-accuracy": 4.0})
    assert curve(tmp_path, "cifar10-q01", "pfedgm") == {2: (42.0, 2.0), 3: (52.0, 4.0)}


def _curve_run(out: Path, run: str, seed: int, points: dict[int, float]) -> None:
    """A finished run that evaluated at each of `points`' rounds (the last one is final)."""
    folder = _fake_run(out, "cifar10-q01", run, seed, [0.5])
    *mid, (last, final) = points.items()
    folder.write_rounds(
        [{"round": r, "personalized-accuracy": a, "personalized-std": 1.0} for r, a in mid]
    )
    folder.write_summary({"rounds": last, "mean-accuracy": final, "std-accuracy": 1.0})


def test_the_rendered_curves_give_each_round_and_pfedgm_minus_each_row(tmp_path):
    _curve_run(tmp_path, "pfedgm", 0, {5: 30.0, 10: 40.0})
    _curve_run(tmp_path, "pfedgm", 1, {5: 34.0, 10: 44.0})
    _curve_run(tmp_path, "pfedfda", 0, {5: 35.0, 10: 41.0})
    text = render.markdown(tmp_path, TABLES["low-participation"])
    assert "| | 5 | 10 |" in text
    assert "| pFedGM | 32.00 | 42.00 |" in text  # the mean over seeds
    assert "| pFedFDA | 35.00 (-3.00) | 41.00 (+1.00) |" in text
    assert "| FedAvg |" not in text.split("evaluated round")[-1]  # no run, no row


def test_a_lone_curve_gives_no_per_round_table(tmp_path):
    _curve_run(tmp_path, "pfedgm", 0, {5: 30.0, 10: 40.0})
    assert "evaluated round" not in render.markdown(tmp_path, TABLES["low-participation"])
    _curve_run(tmp_path, "fedavg", 0, {5: 20.0, 10: 25.0})
    assert "| FedAvg | 20.00 (+10.00) | 25.00 (+15.00) |" in render.markdown(
        tmp_path, TABLES["low-participation"]
    )


def test_figures_are_drawn_for_the_cells_that_have_runs(tmp_path):
    from pfedgm_paper.figures import figures

    _fake_run(tmp_path, "cifar10s-dir05-100c", "pfedgm", 0, [0.8, 0.6])
    _fake_run(tmp_path, "cifar10s-dir05-100c", "pfedgm-npo", 0, [0.7, 0.5])
    written = figures(tmp_path, tmp_path / "figures", ["objective", "corruption"])
    names = sorted(p.name for p in written)
    assert names == ["corruption-cifar10s-dir05-100c-clients.png", "objective-bars.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)


def test_the_readings_study_holds_out_validation_and_runs_the_default_first():
    """Every run of the readings table evaluates on a validation split of the training data;
    each differs from the default reading by exactly one key, and the default runs first."""
    study = runs(["readings"], [0])
    default = grid.TABLES["readings"].rows[-1]
    assert study[0].name == default.run == "pfedgm-val-default"
    for run in study:
        assert run.keys["validation-fraction"] == 0.1
        assert len(set(run.keys.items()) ^ set(default.keys.items())) <= 1, run.name


def test_the_finalists_are_validation_readings_run_on_the_test_sets():
    """Each finalist row has the keys of a validation row less the hold-out, and the default
    reading is among them, so its test accuracy is the one they are read against."""
    validation = [
        {k: v for k, v in row.keys.items() if k != "validation-fraction"}
        for row in grid.TABLES["readings"].rows
    ]
    finalists = grid.TABLES["readings-test"]
    assert finalists.columns == grid.TABLES["readings"].columns
    for run in runs(["readings-test"], [0]):
        assert "validation-fraction" not in run.keys
        assert {"method": "pfedgm", **run.keys} in [{"method": "pfedgm", **v} for v in validation]
    assert finalists.rows[-1].keys == {"method": "pfedgm", "navigator-std": 1.0}  # as it ran


def test_the_navigator_std_study_holds_out_validation_and_varies_the_std_alone():
    """200-round study rows (docs/notes/navigator-std.md): each on validation, the literal
    reading (std 1, the default the study replaced) last and pinned, so that the study runs
    again as it ran; the others a std (NPO also drops R_c) and nothing else."""
    study = grid.TABLES["navigator-std"]
    default = study.rows[-1]
    assert default.keys == {"method": "pfedgm", "validation-fraction": 0.1, "navigator-std": 1.0}
    stds = set()
    for row in study.rows[:-1]:
        extra = {k: v for k, v in row.keys.items() if default.keys.get(k) != v}
        stds.add(extra.pop("navigator-std"))
        assert extra in ({}, {"personalized-objective": False}), row.name
    assert stds == {0.3, 128**-0.5, 0.03}


def test_the_phase2_study_varies_phase2_keys_alone_on_validation():
    """Phase 2 from a kept model: every row holds out validation and changes only Phase 2's
    keys (a Phase 1 key would make the kept model the wrong one); each run once per column."""
    study = grid.TABLES["phase2"]
    phase2 = {"lbfgs-line-search", "personal-batch-size", "personal-epochs"}
    assert study.rows[-1].keys == {"method": "pfedgm", "validation-fraction": 0.1}
    for row in study.rows:
        assert row.keys["validation-fraction"] == 0.1
        assert set(row.keys) - {"method", "validation-fraction"} <= phase2, row.name
    assert len(runs(["phase2"], [0], ["cifar100-dir05"])) == len(study.rows)


def test_the_dynamics_figure_draws_a_pfedgm_run_beside_another(tmp_path, capsys):
    from pfedgm_app.learning.diagnostics import KEYS

    gm, other = tmp_path / "gm", tmp_path / "other"
    for folder, rows in (
        (gm, [{"round": r, **dict.fromkeys(KEYS, 0.5 * r)} for r in (1, 2)]),
        (other, [{"round": 1}, {"round": 2, "personalized-accuracy": 30.0}]),
    ):
        folder.mkdir()
        RunFolder(folder).write_rounds(rows)
    png = tmp_path / "dynamics.png"
    assert cli.main(["dynamics", str(gm), "--beside", str(other), "--to", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    assert cli.main(["dynamics", str(other), "--to", str(png)]) == 2  # no diagnostics there
    assert "no Phase 1 diagnostics" in capsys.readouterr().err


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells; an escaped `\\|` (as in `\\|A\\|`) stays inside its cell."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]


def test_the_dynamics_table_reads_each_run_at_the_rounds_asked(tmp_path, capsys):
    """One row per run and round: its accuracy where it evaluated, fractions as percentages,
    the cell named by the run's folder; a round the run lacks is left out, none is an error."""
    from pfedgm_app.learning.diagnostics import KEYS

    run = tmp_path / "out" / "cifar10-dir05" / "pfedgm" / "seed0"
    run.mkdir(parents=True)
    rows = [{"round": r, **dict.fromkeys(KEYS, 0.01 * r)} for r in (1, 2, 3)]
    rows[1]["personalized-accuracy"] = 41.234
    RunFolder(run).write_rounds(rows)
    table = tmp_path / "dynamics.md"
    assert cli.main(["dynamics", str(run), "--table", str(table), "--at", "2,3,9"]) == 0
    header, _, two, three = table.read_text().splitlines()
    cells, names = _cells(two), _cells(header)
    assert cells[:3] == ["cifar10-dir05 pfedgm", "2", "41.23"]
    assert cells[names.index("H")] == "0.02"
    assert cells[names.index("P_y > 0.99, training (%)")] == "2"
    assert (
        cells[names.index("logit margin")] == cells[names.index("cos(mu_k, upsilon_k)")] == "0.02"
    )
    assert cells[names.index("relative spread (d = 128)")] == "6.4e+03"  # 128 * 0.02 / 0.02^2
    assert three.split("|")[3].strip() == "-"  # not evaluated at round 3
    capsys.readouterr()
    assert cli.main(["dynamics", str(run), "--table", str(table), "--at", "7"]) == 2
    assert "none of the rounds [7]" in capsys.readouterr().err
    assert cli.main(["dynamics", str(run), "--table", str(table), "--at", "2", "--dim", "512"]) == 0
    header, _, two = table.read_text().splitlines()
    assert _cells(two)[_cells(header).index("relative spread (d = 512)")] == "2.56e+04"
    assert cli.main(["dynamics", str(run), "--table", str(table), "--at", "x"]) == 2
    assert cli.main(["dynamics", str(run)]) == 2  # neither --to nor --table


def test_paired_compares_two_runs_client_by_client(tmp_path, capsys):
    """A - B over the clients both have, weighted by test size (`paired.paired_gap`): two
    clients, A above by 10 and 20 points, test sizes 10 and 11."""
    a = _fake_run(tmp_path / "a", "c", "pfedgm", 0, [0.6, 0.7])
    b = _fake_run(tmp_path / "b", "c", "pfedgm", 0, [0.5, 0.5])
    assert cli.main(["paired", str(a.path), str(b.path)]) == 0
    gap = (10 * 10 + 11 * 20) / 21
    assert f"A - B per client: +{gap:.2f}" in capsys.readouterr().out
    assert cli.main(["paired", str(a.path), str(tmp_path)]) == 2  # not a run
    assert cli.main(["paired", str(a.path), str(b.path), "--metric", "nope"]) == 2
    other = _fake_run(tmp_path / "o", "c", "pfedgm", 0, [0.5, 0.5])
    other.write_clients([{"partition-id": 7, "accuracy": 0.5, "num-test": 3}])
    assert cli.main(["paired", str(a.path), str(other.path)]) == 2  # no client in common
    assert "share no client" in capsys.readouterr().err


def test_collected_records_name_no_absolute_path_and_the_committed_ones_neither(tmp_path):
    """`collect` writes the dataset as `shared:<name>` and the output folder as the run's
    folder below the results folder; every committed record under results/ is so written."""
    from pfedgm_paper.records import portable

    run = _fake_run(tmp_path / "out", "cifar10-dir05", "pfedgm", 0, [0.5])
    config = {"dataset": "/home/x/shared/data/cifar10", "output-dir": str(run.path),
              "frost-dir": "/home/x/frost", "seed": 0}  # fmt: skip
    run.write_config(config)
    assert cli.main(["collect", "--out", str(tmp_path / "out"), "--to", str(tmp_path / "c")]) == 0
    kept = RunFolder(tmp_path / "c" / "cifar10-dir05" / "pfedgm" / "seed0").read_config()
    assert kept == {"dataset": "shared:cifar10", "output-dir": "cifar10-dir05/pfedgm/seed0",
                    "frost-dir": "frost", "seed": 0, "format-version": 2}  # fmt: skip
    assert portable("uoft-cs/cifar10", "r") == "uoft-cs/cifar10"  # a hub id stays
    # --runs and --skip: a grid's pFedGM runs to one folder, its baselines to another
    _fake_run(tmp_path / "out", "cifar10-dir05", "fedpac", 0, [0.5])
    _fake_run(tmp_path / "out", "cifar10-dir01", "pfedgm-npo", 0, [0.5])
    out = ["collect", "--out", str(tmp_path / "out"), "--to"]
    assert cli.main([*out, str(tmp_path / "ours"), "--runs", "pfedgm*", "--skip", "*-npo"]) == 0
    assert cli.main([*out, str(tmp_path / "base"), "--skip", "pfedgm*"]) == 0
    found = {p.name: sorted(q.parent.name for q in p.rglob("seed0")) for p in tmp_path.iterdir()}
    assert (found["ours"], found["base"]) == (["pfedgm"], ["fedpac"])
    records = [p for p in (ROOT / "results").rglob("*.json")]
    absolute = [str(p) for p in records if '": "/' in p.read_text()]
    assert records and not absolute, absolute[:3]


def test_the_aggregation_table_runs_every_aggregator_and_each_bound_off_beside_the_default():
    rows = TABLES["aggregation"].rows
    aggregations = {row.keys.get("aggregation", "mean") for row in rows}
    assert aggregations == set(AGGREGATIONS)
    tolerated = {row.keys.get("byzantine-nodes", 1) for row in rows
                 if row.keys.get("aggregation") == "multi-krum"}  # fmt: skip
    assert tolerated == {1, 2}  # f = 2: the collusion defence's honest cost
    assert [row.keys for row in rows if row.keys.get("clip-ratio") == 0.0]
    assert [row.keys for row in rows if row.keys.get("pull-bound") == 0.0]
    assert rows[-1].keys == {"method": "pfedgm", **VALIDATION}  # the default, paired with all
    assert all(row.keys["validation-fraction"] > 0 for row in rows)  # never the test sets


def test_the_privacy_figure_draws_accuracy_against_epsilon_per_method(tmp_path):
    from pfedgm_paper.figures import figures, privacy_lines

    rows = (*TABLES["privacy"].rows[:2], TABLES["privacy"].rows[-1])  # the last: Local's line
    for row, accuracies in zip(rows, ([0.8, 0.6], [0.7, 0.5], [0.5, 0.4]), strict=True):
        _fake_run(tmp_path, "cifar10-dir05", row.run, 0, accuracies)
    written = figures(tmp_path, tmp_path / "figures", ["privacy"])
    assert tmp_path / "figures" / "privacy-cifar10-dir05.png" in written
    assert written[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = privacy_lines({}, TABLES["privacy"], "cifar10-dir05", tmp_path / "none.png")
    assert empty is None and not (tmp_path / "none.png").exists()


def test_each_methods_dp_clip_is_its_best_on_validation_in_the_committed_study():
    """The epsilon table runs each method at the C of its best validation accuracy in the
    committed clip study, its row complete; FedAvg's rows read FedAvgFT's global accuracy."""
    from pfedgm_paper.studies import DP_CLIPS, PRIVACY, PRIVACY_CLIP

    out = ROOT / "results" / "paper" / "privacy-clip" / "runs"
    for method, clip in DP_CLIPS.items():
        rows = [row for row in PRIVACY_CLIP if row.name.startswith(f"{method}-")]
        cells = {row.name: read_cell(out, "cifar10-dir05", row) for row in rows}
        assert None not in cells.values(), f"{method}: its clip study is not complete"
        best = max(cells, key=lambda name: cells[name].mean)  # type: ignore[union-attr]
        assert best == f"{method}-val-dp4-clip-{clip}", (method, best)
    assert {row.run.split("-")[0] for row in PRIVACY + PRIVACY_CLIP} <= set(METHODS) - {"fedavg"}
    assert all(row.metric == "acc-global" for row in PRIVACY_CLIP if row.name.startswith("fedavg-"))
