"""The comparison table: which orderings it reports as departures from the paper's, and that it
refuses to mix protocols."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("paper_table", ROOT / "benchmarks/paper_table.py")
paper_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paper_table)


def test_order_departures_reports_reversed_pairs_beyond_the_margin():
    paper = {"a": 90.0, "b": 85.0, "c": 84.5, "d": 60.0}
    ours = {"a": 80.0, "b": 82.0, "c": 83.0, "d": 70.0}  # a<b, a<c, b<c (paper gap 0.5)
    got = paper_table.order_departures(ours, paper, margin=1.0)
    assert [(a, b) for a, b, *_ in got] == [("a", "c"), ("a", "b")]  # largest paper gap first
    a, c, pgap, ogap = got[0]
    assert pgap == pytest.approx(5.5) and ogap == pytest.approx(-3.0)
    assert ("b", "c") in [(a, b) for a, b, *_ in paper_table.order_departures(ours, paper, 0.0)]


def test_order_departures_ignores_methods_the_paper_lacks_and_agreeing_orders():
    paper = {"a": 90.0, "b": 80.0}
    assert paper_table.order_departures({"a": 91.0, "b": 70.0, "x": 99.0}, paper) == []


def _write(out, method, **summary):
    (out / method).mkdir(parents=True)
    base = {"dataset": "d", "num_clients": 100, "rounds": 50, "fraction_train": 0.3}
    base |= {"dirichlet_alpha": 0.1, "mean_accuracy": 50.0, "std_accuracy": 1.0}
    base |= {"seconds_per_round": 10.0, "seconds_total": 600.0}
    (out / method / "summary.json").write_text(json.dumps(base | summary))


def test_table_refuses_runs_of_different_protocols(tmp_path):
    _write(tmp_path / "a", "fedavg")
    _write(tmp_path / "a", "pfedgm", seconds_per_round=12.5, seconds_total=900.0)
    _write(tmp_path / "b", "fedavg", dirichlet_alpha=0.5, rounds=10)
    columns = {0.1: paper_table.load_summaries(tmp_path / "a")}
    assert list(columns[0.1]) == ["fedavg", "pfedgm"]
    assert paper_table.time_ratio(columns[0.1], "pfedgm") == pytest.approx(1.5)
    assert paper_table.time_ratio(columns[0.1], "pfedgm", "seconds_per_round") == 1.25
    paper_table.check_same_protocol(columns)
    columns[0.5] = paper_table.load_summaries(tmp_path / "b")
    with pytest.raises(SystemExit, match="different protocols"):
        paper_table.check_same_protocol(columns)


def test_paired_gap_matches_the_weighted_means_and_the_closed_form_standard_error():
    a = {0: (90.0, 10), 1: (80.0, 30), 2: (70.0, 60), 9: (50.0, 5)}  # 9: not in b
    b = {0: (85.0, 10), 1: (82.0, 30), 2: (66.0, 60)}
    gap, se = paper_table.paired_gap(a, b)
    mean = lambda r: sum(r[i][0] * r[i][1] for i in (0, 1, 2)) / 100  # noqa: E731
    assert gap == pytest.approx(mean(a) - mean(b))  # the summaries' weighted means, paired
    d = [5.0, -2.0, 4.0]
    want = sum((w * (di - gap)) ** 2 for w, di in zip([10, 30, 60], d, strict=True)) ** 0.5 / 100
    assert se == pytest.approx(want)
    equal = paper_table.paired_gap(
        {i: (float(i), 1) for i in range(4)}, {i: (0.0, 1) for i in range(4)}
    )
    assert equal[1] == pytest.approx(
        (sum((i - 1.5) ** 2 for i in range(4)) / 4) ** 0.5 / 2
    )  # std/sqrt(n)


def test_paper_figures_are_shown_only_beside_the_standard_cifar10_protocol(capsys):
    cifar10 = {"dataset": "/data/cifar10", "num_clients": 100, "rounds": 30, "fraction_train": 0.3}
    for summary, shown in [
        (cifar10, True),
        (cifar10 | {"dataset": "uoft-cs/cifar10"}, True),
        (cifar10 | {"dataset": "shared:cifar10"}, True),
        (cifar10 | {"dataset": "/data/cifar100"}, False),
        (cifar10 | {"accuracy_by_type": {"frost": {}}}, False),  # CIFAR-10S
        (cifar10 | {"protocol": "generalization"}, False),
    ]:
        assert bool(paper_table.paper_reference(summary)) is shown, summary
        row = summary | {"dirichlet_alpha": 0.5, "mean_accuracy": 50.0, "std_accuracy": 1.0}
        paper_table.print_table({0.5: {"pfedgm": row}})
        out = capsys.readouterr().out
        assert out.startswith(paper_table.dataset_name(summary) + ", 100 clients")
        assert ("77.49 (7.1)" in out) is shown  # the paper's pFedGM at Dir(0.5)
