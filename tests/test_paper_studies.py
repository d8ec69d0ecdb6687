"""The paper's studies (`pfedgm_paper.studies`, `dynamics`, `paired`, `records`): what each
study table runs, the dynamics figure and table, two runs compared client by client, and
collected records that name no absolute path."""

from __future__ import annotations

import re
from pathlib import Path

from pfedgm_app.methods import METHODS
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import AGGREGATIONS
from pfedgm_paper import cli, grid
from pfedgm_paper.cells import read_cell
from pfedgm_paper.grid import TABLES, runs
from pfedgm_paper.studies import VALIDATION
from tests.paper_fakes import _fake_run

ROOT = Path(__file__).resolve().parents[1]


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
