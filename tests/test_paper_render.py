"""The paper's tables from run folders (`pfedgm_paper.cells`, `render`, `figures`): a cell and
a paired difference, the marks of another protocol, runtimes, curves and figures."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from devtools import migrate_records
from pfedgm_paper import cli, grid, render
from pfedgm_paper.cells import curve, read_cell
from pfedgm_paper.grid import TABLES
from pfedgm_paper.published import PUBLISHED
from tests.paper_fakes import _fake_run

ROOT = Path(__file__).resolve().parents[1]


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


def test_a_cell_whose_replies_the_influence_bound_scaled_says_how_many_per_seed(tmp_path):
    """Seed 0 ran before the bound (no `clip-ratio` in its config), seed 1 at clip-ratio 5
    with 3 of 60 replies clipped and 1 scaled to the pull bound: the cell gets ¶ and a line
    with both counts and the seed without it; a bound that scaled nothing, a DP run's clip to
    C, or no bound at all (`clip-ratio` 0) gets no mark."""
    config = {"num-server-rounds": 3, "local-epochs": 5, "pool-size": 0}
    old = _fake_run(tmp_path, "cifar10-dir05", "pfedfda", 0, [0.5, 0.4], rounds=3)
    old.write_config(config)
    new = _fake_run(tmp_path, "cifar10-dir05", "pfedfda", 1, [0.6, 0.4], rounds=3)
    new.write_config({**config, "clip-ratio": 5.0})
    new.write_rounds([{"round": 1, "num-clients": 30, "updates-clipped": 2},
                      {"round": 2, "num-clients": 30, "updates-clipped": 1,
                       "updates-pull-bounded": 1},
                      {"round": 4, "personalized-accuracy": 50.0}])  # fmt: skip
    text = render.markdown(tmp_path, TABLES["standard"])
    marked = next(line for line in text.splitlines() if line.startswith("| pFedFDA |"))
    assert "¶" in marked
    assert (
        "¶ pFedFDA, cifar10-dir05: the influence bound clipped 3 and scaled 1 to the pull "
        "bound of 60 replies (6.7 %) in seed 1 (clip-ratio 5); seed 0 ran without it."
    ) in text
    old.write_config({**config, "clip-ratio": 5.0})
    old.write_rounds([{"round": 1, "num-clients": 30, "updates-clipped": 0}])
    assert (  # a seed whose bound scaled nothing says so, without a share
        "¶ pFedFDA, cifar10-dir05: the influence bound scaled none of 30 replies in seed 0 "
        "(clip-ratio 5); clipped 3 and scaled 1 to the pull bound of 60 replies (6.7 %) in "
        "seed 1 (clip-ratio 5)."
    ) in render.markdown(tmp_path, TABLES["standard"])
    new.write_rounds([{"round": 1, "num-clients": 30, "updates-clipped": 0}])
    assert "¶" not in render.markdown(tmp_path, TABLES["standard"])
    new.write_rounds([{"round": 1, "num-clients": 30, "updates-clipped": 4,
                       "dp-clipping-norm": 0.01}])  # fmt: skip
    assert "¶" not in render.markdown(tmp_path, TABLES["standard"])  # DP's clip to C, not it
    new.write_config({**config, "clip-ratio": 0.0})
    new.write_rounds([{"round": 1, "num-clients": 30, "updates-clipped": 4}])
    assert "¶" not in render.markdown(tmp_path, TABLES["standard"])


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
    for name in sizes:  # pooled, as a run partitions them
        assert f"{sum(sizes[name].values()):,} images" in SUBSETS[f"shared:{name}"]


def test_runtime_is_minutes_and_a_rounds_ratio_to_fedavgs(tmp_path):
    _fake_run(tmp_path, "cifar10-dir05", "fedavg", 0, [0.5], minutes=2.0, per_round=8.0)
    _fake_run(tmp_path, "cifar10-dir05", "pfedgm", 0, [0.5], minutes=3.0, per_round=10.0)
    text = render.markdown(tmp_path, TABLES["runtime"])
    assert "3.0 min, 10.0 s a round (1.25x)<br>paper 81.75 (1.26x)" in text
    assert {"local", "fedavgft"} <= {row.name for row in TABLES["runtime"].rows}  # every method
    assert "10.00" in render.csv_text(tmp_path, TABLES["runtime"])
    assert "each cell: wall minutes" in text and "test size" not in text


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
