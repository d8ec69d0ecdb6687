"""The run writer: a finished run kept, an unfinished one set aside, a resume checked first."""

from __future__ import annotations

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

from pfedgm_app.records import checkpoint
from pfedgm_app.records.plots import EVAL_MEAN, EVAL_STD
from pfedgm_app.records.results import ELAPSED, RunWriter
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.method_settings import NoSettings
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies import summarize


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
