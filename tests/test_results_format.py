"""Records in format version 2 (kebab-case keys, percent), and version 1's rewritten as such."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from flwr.app import ArrayRecord, MetricRecord

from devtools import migrate_records
from pfedgm_app.records.results import RunWriter, accuracy_by_type
from pfedgm_app.records.run_folder import FORMAT_VERSION, VERSION, RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.method_settings import NoSettings
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies import summarize

ROOT = Path(__file__).resolve().parents[1]


KEBAB = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


def _keys(record: dict) -> set[str]:
    """Every key of a record, nested ones too, less the client types under `accuracy-by-type`
    (`motion_blur`, ...: names of data, not keys of the format)."""
    found = set()
    for key, value in record.items():
        found.add(key)
        inner = value.values() if key == "accuracy-by-type" else [value]
        found |= {k for v in inner if isinstance(v, dict) for k in _keys(v)}
    return found


def test_the_writer_writes_version_2_kebab_case_keys_and_accuracies_in_percent(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path), num_server_rounds=1, eval_every=1)
    writer = RunWriter.create(cfg, NoSettings())
    writer.write_config(cfg, NoSettings(), 2)
    writer.on_round(1, ArrayRecord(), MetricRecord({"loss": 1.0}), **{"replies-dropped": 0})
    writer.training_problems(["round 1: node 5: why"], {1: "no reply"}, [])
    writer.mark("rounds"), writer.mark("trained")
    rows = [{"partition-id": 1, "accuracy": 0.7, "acc-global": 0.5, "num-test": 30,
             "node-id": 2**60 + 1},
            {"partition-id": 0, "accuracy": 0.1234567, "acc-global": 0.25, "num-test": 10,
             "node-id": 7}]  # fmt: skip
    by_type = accuracy_by_type(rows, lambda pid: ("clean", "motion_blur")[pid])
    writer.finish(cfg, 2, summarize(rows, []), by_type)
    folder = RunFolder(tmp_path)
    summary = json.loads(folder.summary.read_text())  # as written, not as read
    assert summary[VERSION] == folder.read_config()[VERSION] == FORMAT_VERSION == 2
    assert folder.format_version == 2
    with folder.clients.open() as f:
        columns = next(csv.reader(f))
    rounds = folder.read_rounds()
    for key in _keys(summary) | set(columns) | {k for r in rounds for k in _keys(r)}:
        assert KEBAB.fullmatch(key), key
    clients = folder.read_clients()
    assert [c["accuracy"] for c in clients] == [100 * 0.1234567, 100 * 0.7]  # percent, exactly
    assert clients[1]["node-id"] == 2**60 + 1  # an int, as written
    assert summary["mean-accuracy"] == pytest.approx((12.34567 * 10 + 70 * 30) / 40)
    assert summary["accuracy-by-type"]["motion_blur"]["mean-accuracy"] == pytest.approx(70.0)
    assert summary["dropped-replies"] == ["round 1: node 5: why"]
    assert summary["rounds-without-update"] == {"1": "no reply"}
    assert folder.read_summary() == summary  # a version-2 record reads as written


V1_SUMMARY = {  # summary.json as the app wrote it before format versions (results/ holds them)
    "method": "pfedgm", "dataset": "shared:cifar10", "dirichlet_alpha": 0.5, "num_clients": 2,
    "rounds": 3, "fraction_train": 1.0, "mean_accuracy": 65.4321, "std_accuracy": 10.5,
    "unweighted_mean_accuracy": 60.25, "accuracy_note": "percent", "failures": ["node 9: x"],
    "ablation_mean_accuracy": {"acc-global": 37.5, "acc-global-cov": 38.0},
    "num_clients_evaluated": 2, "seconds_total": 9.5, "seconds_training": 6.0,
    "seconds_per_round": 2.0, "seconds_personalize": 3.5, "output_dir": "c10/pfedgm/seed0",
    "resumed_after_round": 1, "dropped_replies": ["round 2: node 4: nan"],
    "rounds_without_update": {"2": "every reply dropped"},
    "accuracy_by_type": {"motion_blur": {"mean_accuracy": 70.0, "std_accuracy": 1.5,
                                         "clients": 1}},
}  # fmt: skip
V1_CLIENTS = "partition-id,accuracy,acc-global,node-id,num-test\n0,0.1234567,0.25,7,10\n1,1,,9,30\n"
V1_ROUNDS = [{"round": 1, "loss": 2.5, "seconds": 1.0},
             {"round": 2, "loss": 1.5, "personalized-accuracy": 60.0, "personalized-std": 2.0,
              "accuracy-by-type": {"motion_blur": 61.0}}]  # fmt: skip


def _v1_folder(path: Path) -> RunFolder:
    folder = RunFolder(path)
    path.mkdir(parents=True, exist_ok=True)
    folder.config.write_text(json.dumps({"method": "pfedgm", "num-clients": 2}))  # no version
    folder.summary.write_text(json.dumps(V1_SUMMARY))
    folder.clients.write_text(V1_CLIENTS)
    folder.rounds.write_text("".join(json.dumps(r) + "\n" for r in V1_ROUNDS))
    return folder


def test_a_version_1_folder_is_refused_in_one_line_naming_the_rewrite(tmp_path):
    folder = _v1_folder(tmp_path / "v1")
    assert folder.format_version == 1
    for read in (folder.read_summary, folder.read_clients):
        with pytest.raises(ConfigError) as err:
            read()
        assert "\n" not in str(err.value) and "python -m devtools.migrate_records" in str(err.value)
    folder.config.unlink()  # a copy without its config: versioned by its summary
    assert folder.format_version == 1


def test_the_rewrite_gives_version_2_with_the_same_numbers(tmp_path):
    folder = _v1_folder(tmp_path / "runs" / "v1")
    assert migrate_records.main([str(tmp_path / "runs")]) == 0
    assert folder.format_version == 2
    summary = folder.read_summary()
    assert summary == {
        "method": "pfedgm", "dataset": "shared:cifar10", "dirichlet-alpha": 0.5,
        "num-clients": 2, "rounds": 3, "fraction-train": 1.0, "mean-accuracy": 65.4321,
        "std-accuracy": 10.5, "unweighted-mean-accuracy": 60.25, "accuracy-note": "percent",
        "failures": ["node 9: x"],
        "ablation-mean-accuracy": {"acc-global": 37.5, "acc-global-cov": 38.0},
        "num-clients-evaluated": 2, "seconds-total": 9.5, "seconds-training": 6.0,
        "seconds-per-round": 2.0, "seconds-personalize": 3.5, "output-dir": "c10/pfedgm/seed0",
        "resumed-after-round": 1, "dropped-replies": ["round 2: node 4: nan"],
        "rounds-without-update": {"2": "every reply dropped"},
        "accuracy-by-type": {"motion_blur": {"mean-accuracy": 70.0, "std-accuracy": 1.5,
                                             "clients": 1}},
        VERSION: 2,
    }  # fmt: skip
    # clients.csv: fractions to percent (a missing cell left out), as version 2 writes them
    clients = folder.read_clients()
    assert clients == [
        {"partition-id": 0, "accuracy": 100 * 0.1234567, "acc-global": 25.0, "node-id": 7,
         "num-test": 10},
        {"partition-id": 1, "accuracy": 100, "node-id": 9, "num-test": 30},
    ]  # fmt: skip
    v2 = RunFolder(tmp_path / "v2")
    v2.path.mkdir()
    v2.write_config({"method": "pfedgm"})
    v2.write_clients([
        {"partition-id": 0, "accuracy": 0.1234567, "acc-global": 0.25, "node-id": 7,
         "num-test": 10},
        {"partition-id": 1, "accuracy": 1, "node-id": 9, "num-test": 30},
    ])  # fmt: skip
    assert v2.read_clients() == clients
    assert folder.read_rounds() == V1_ROUNDS  # version 1's rounds.jsonl is version 2's already
    assert migrate_records.main([str(tmp_path / "runs")]) == 0  # once is enough
    assert folder.read_clients() == clients


def test_every_committed_record_is_version_2_with_kebab_case_keys():
    summaries = sorted((ROOT / "results").rglob(RunFolder(ROOT).summary.name))
    assert summaries
    for path in summaries:
        record = RunFolder(path.parent).read_summary()
        assert [k for k in _keys(record) if not KEBAB.fullmatch(k)] == [], path
