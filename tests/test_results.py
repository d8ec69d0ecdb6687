"""What a run writes: a finished run is never overwritten, an unfinished one is set aside; its
records in format version 2 (kebab-case keys, accuracies in percent), and version 1's read as
version 2's."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, MetricRecord

from devtools import migrate_records
from pfedgm_app.records import checkpoint
from pfedgm_app.records.plots import EVAL_MEAN, EVAL_STD
from pfedgm_app.records.results import ELAPSED, RunWriter, accuracy_by_type
from pfedgm_app.records.run_folder import FORMAT_VERSION, VERSION, RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.method_settings import NoSettings
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies import summarize

ROOT = Path(__file__).resolve().parents[1]


def test_a_finished_run_is_never_overwritten(tmp_path):
    RunFolder(tmp_path).summary.write_text("{}")
    with pytest.raises(ConfigError, match="already holds a finished run"):
        RunWriter.create(RunConfig(output_dir=str(tmp_path)), NoSettings())
    assert RunFolder(tmp_path).summary.read_text() == "{}"


def test_an_unfinished_run_is_set_aside_and_the_new_one_starts_clean(tmp_path):
    folder = RunFolder(tmp_path)
    folder.config.write_text("old config")
    folder.rounds.write_text('{"round": 1}\n{"round": 2}\n')
    cfg = RunConfig(output_dir=str(tmp_path))
    writer = RunWriter.create(cfg, NoSettings())
    writer.write_config(cfg, NoSettings(), 1)  # the run's first write sets the old files aside
    writer.append_round(1, None)
    rounds = folder.rounds.read_text().splitlines()
    assert rounds == ['{"round": 1}']  # not a continuation of the stopped run
    (kept,) = map(RunFolder, tmp_path.glob("unfinished-*"))
    assert kept.rounds.read_text().count("round") == 2  # nothing lost
    assert kept.config.read_text() == "old config"
    writer.close()
    folder.config.write_text("second stopped run")  # stopped again, same second
    RunWriter.create(cfg, NoSettings()).write_config(cfg, NoSettings(), 1)
    kept_twice = sorted(tmp_path.glob("unfinished-*"))
    assert len(kept_twice) == 2  # the first set-aside run is not overwritten
    assert kept.config.read_text() == "old config"


def test_a_fresh_output_dir_is_created_at_the_first_write(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path / "a" / "b"))
    RunWriter.create(cfg, NoSettings()).write_config(cfg, NoSettings(), 1)
    written = [p.name for p in (tmp_path / "a" / "b").iterdir() if not p.name.startswith(".")]
    assert written == [RunFolder(tmp_path).config.name]  # and the run's lock


def test_a_run_that_cannot_start_leaves_no_folder_and_an_unwritable_one_is_named(tmp_path):
    target = tmp_path / "run"
    RunWriter.create(
        RunConfig(output_dir=str(target)), NoSettings()
    )  # then discovery fails: nothing written
    assert not target.exists()
    (tmp_path / "ro").mkdir(mode=0o500)
    if not os.access(tmp_path / "ro", os.W_OK):  # root writes anywhere
        with pytest.raises(ConfigError, match="is not writable"):
            RunWriter.create(RunConfig(output_dir=str(tmp_path / "ro" / "run")), NoSettings())


def test_the_final_evaluation_joins_the_last_round_and_every_run_gets_a_plot(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path), num_server_rounds=2, eval_every=1)
    writer = RunWriter.create(cfg, NoSettings())
    writer.write_config(cfg, NoSettings(), 2)
    writer.append_round(1, MetricRecord({"loss": 2.0}), **{EVAL_MEAN: 40.0, EVAL_STD: 5.0})
    writer.append_round(2, MetricRecord({"loss": 1.0}))
    for name in ("rounds", "trained"):
        writer.mark(name)
    rows = [{"partition-id": i, "accuracy": a, "num-test": 10} for i, a in enumerate((0.5, 0.7))]
    writer.finish(cfg, 2, summarize(rows, []))
    lines = RunFolder(tmp_path).read_rounds()
    assert [r["round"] for r in lines] == [1, 2]  # one line per round, the last one completed
    assert lines[-1]["loss"] == 1.0 and lines[-1][EVAL_MEAN] == pytest.approx(60.0)
    assert RunFolder(tmp_path).plot.stat().st_size > 0


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


def test_resuming_drops_a_torn_last_line_of_rounds_and_cuts_back_to_the_checkpoint(tmp_path):
    checkpoint.save(tmp_path, 2, ArrayRecord({"w": Array(np.zeros(2))}), {"rng": None})
    lines = ['{"round": 1}', '{"round": 2}', '{"round": 3}', '{"rou']  # killed mid-write
    RunFolder(tmp_path).rounds.write_text("\n".join(lines))
    done, arrays, _ = checkpoint.load(tmp_path)
    RunWriter(tmp_path).cut_rounds(done)
    assert done == 2 and list(arrays) == ["w"]
    assert RunFolder(tmp_path).rounds.read_text() == '{"round": 1}\n{"round": 2}\n'


def _finish(writer: RunWriter, cfg: RunConfig) -> dict:
    for name in ("rounds", "trained"):
        writer.mark(name)
    rows = [{"partition-id": 0, "accuracy": 0.5, "num-test": 10}]
    return writer.finish(cfg, 1, summarize(rows, []))


@pytest.mark.parametrize(
    ("kept", "earlier"),
    [  # rounds 1 and 2 kept, round 3 (after the checkpoint) dropped
        ([{"seconds": 5.0, ELAPSED: 400.0}, {"seconds": 7.0, ELAPSED: 600.0}], 600.0),
        ([{"seconds": 5.0}, {"seconds": 7.0}], 12.0),  # rows from before ELAPSED: a lower bound
    ],
)
def test_a_resumed_runs_seconds_total_counts_its_earlier_sittings(tmp_path, kept, earlier):
    rows = [{"round": i + 1, **r} for i, r in enumerate(kept)] + [{"round": 3, "seconds": 9.0}]
    RunFolder(tmp_path).rounds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = RunConfig(output_dir=str(tmp_path), num_server_rounds=3)
    writer = RunWriter(tmp_path)
    writer.cut_rounds(2)
    writer.on_round(3, ArrayRecord(), None)
    summary = _finish(writer, cfg)
    sitting = writer.times["finished"] - writer.times["started"]
    assert summary["seconds-total"] == pytest.approx(earlier + sitting)
    # the other seconds are this sitting's: within it, and training and personalize fill it
    training, personalize = summary["seconds-training"], summary["seconds-personalize"]
    assert math.isfinite(training) and 0 <= training <= sitting
    assert training + personalize == pytest.approx(sitting)
    last = RunFolder(tmp_path).read_rounds()[-1]
    assert earlier <= last[ELAPSED] <= summary["seconds-total"]


def _stopped_run(folder, **keys) -> RunConfig:
    """A run of 2 rounds, stopped: its config.json and checkpoint, as a run leaves them."""
    cfg = RunConfig(output_dir=str(folder), num_server_rounds=5, **keys)
    writer = RunWriter.create(cfg, NoSettings())
    writer.write_config(cfg, NoSettings(), 4)
    checkpoint.save(folder, 2, ArrayRecord({"w": Array(np.zeros(1))}), {})
    writer.close()
    return dataclasses.replace(cfg, resume=True)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"method": "fedper"}, "method: 'fedavg' -> 'fedper'"),
        ({"dirichlet_alpha": 0.1}, "dirichlet-alpha: 0.5 -> 0.1"),
        ({"seed": 1}, "seed: 0 -> 1"),
        ({"dataset": "/elsewhere"}, "dataset:"),
        ({"num_server_rounds": 1}, "has done 2 rounds: give at least 2"),
    ],
)
def test_resume_refuses_another_experiment_before_touching_the_folder(tmp_path, change, named):
    resumed = dataclasses.replace(_stopped_run(tmp_path, method="fedavg"), **change)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(ConfigError, match=re.escape(named)):
        RunWriter.create(resumed, NoSettings())
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_resume_may_change_how_a_run_runs_and_add_rounds(tmp_path):
    resumed = _stopped_run(tmp_path)
    more = dataclasses.replace(resumed, num_server_rounds=9, client_threads=1, eval_every=3)
    writer = RunWriter.create(more, NoSettings())  # the resumable keys: no refusal
    assert writer.run_dir == Path(resumed.output_dir).resolve() and not writer.fresh
    writer.close()
    fewer = dataclasses.replace(resumed, num_server_rounds=1)  # fewer rounds than are done
    with pytest.raises(ConfigError, match="has done"):
        RunWriter.create(fewer, NoSettings())


def test_an_output_dir_in_use_by_a_live_run_is_refused_and_a_killed_run_leaves_no_lock(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path / "run"))
    first = RunWriter.create(cfg, NoSettings())
    first.write_config(cfg, NoSettings(), 1)
    with pytest.raises(ConfigError, match="in use by a live run"):
        RunWriter.create(cfg, NoSettings()).write_config(cfg, NoSettings(), 1)
    first.close()
    script = ("import sys, time; from pathlib import Path; "
              "from pfedgm_app.records.checkpoint import FolderLock; "
              "lock = FolderLock(Path(sys.argv[1])); print('locked', flush=True); "
              "time.sleep(60)")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "run")],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(ConfigError, match="in use by a live run"):
        checkpoint.FolderLock(tmp_path / "run")
    holder.kill()
    holder.wait()
    checkpoint.FolderLock(tmp_path / "run").release()  # the killed run's lock went with it
