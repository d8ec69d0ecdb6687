"""What a run writes: a finished run is never overwritten, an unfinished one is set aside."""

from __future__ import annotations

import json
import os

import pytest
from flwr.app import MetricRecord

from pfedgm_app.config import ConfigError, RunConfig
from pfedgm_app.methods.base import NoSettings
from pfedgm_app.results import EVAL_MEAN, EVAL_STD, RunWriter
from pfedgm_app.strategies import summarize


def test_a_finished_run_is_never_overwritten(tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(ConfigError, match="already holds a finished run"):
        RunWriter.create(RunConfig(output_dir=str(tmp_path)))
    assert (tmp_path / "summary.json").read_text() == "{}"


def test_an_unfinished_run_is_set_aside_and_the_new_one_starts_clean(tmp_path):
    (tmp_path / "config.json").write_text("old config")
    (tmp_path / "rounds.jsonl").write_text('{"round": 1}\n{"round": 2}\n')
    cfg = RunConfig(output_dir=str(tmp_path))
    writer = RunWriter.create(cfg)
    writer.write_config(cfg, NoSettings(), 1)  # the run's first write sets the old files aside
    writer.append_round(1, None)
    rounds = (tmp_path / "rounds.jsonl").read_text().splitlines()
    assert rounds == ['{"round": 1}']  # not a continuation of the stopped run
    (kept,) = tmp_path.glob("unfinished-*")
    assert (kept / "rounds.jsonl").read_text().count("round") == 2  # nothing lost
    assert (kept / "config.json").read_text() == "old config"
    (tmp_path / "config.json").write_text("second stopped run")  # stopped again, same second
    RunWriter.create(cfg).write_config(cfg, NoSettings(), 1)
    kept_twice = sorted(tmp_path.glob("unfinished-*"))
    assert len(kept_twice) == 2  # the first set-aside run is not overwritten
    assert (kept / "config.json").read_text() == "old config"


def test_a_fresh_output_dir_is_created_at_the_first_write(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path / "a" / "b"))
    RunWriter.create(cfg).write_config(cfg, NoSettings(), 1)
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == ["config.json"]


def test_a_run_that_cannot_start_leaves_no_folder_and_an_unwritable_one_is_named(tmp_path):
    target = tmp_path / "run"
    RunWriter.create(RunConfig(output_dir=str(target)))  # then discovery fails: nothing written
    assert not target.exists()
    (tmp_path / "ro").mkdir(mode=0o500)
    if not os.access(tmp_path / "ro", os.W_OK):  # root writes anywhere
        with pytest.raises(ConfigError, match="is not writable"):
            RunWriter.create(RunConfig(output_dir=str(tmp_path / "ro" / "run")))


def test_the_final_evaluation_joins_the_last_round_and_every_run_gets_a_plot(tmp_path):
    cfg = RunConfig(output_dir=str(tmp_path), num_server_rounds=2, eval_every=1)
    writer = RunWriter.create(cfg)
    writer.write_config(cfg, NoSettings(), 2)
    writer.append_round(1, MetricRecord({"loss": 2.0}), **{EVAL_MEAN: 40.0, EVAL_STD: 5.0})
    writer.append_round(2, MetricRecord({"loss": 1.0}))
    for name in ("rounds", "trained"):
        writer.mark(name)
    rows = [{"partition-id": i, "accuracy": a, "num-test": 10} for i, a in enumerate((0.5, 0.7))]
    writer.finish(cfg, 2, summarize(rows, []))
    lines = [json.loads(r) for r in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2]  # one line per round, the last one completed
    assert lines[-1]["loss"] == 1.0 and lines[-1][EVAL_MEAN] == pytest.approx(60.0)
    assert (tmp_path / "accuracy.png").stat().st_size > 0


def test_resuming_drops_a_torn_last_line_of_rounds_and_cuts_back_to_the_checkpoint(tmp_path):
    import numpy as np
    from flwr.app import Array, ArrayRecord

    writer = RunWriter(tmp_path)
    writer.save_checkpoint(2, ArrayRecord({"w": Array(np.zeros(2))}), {"rng": None})
    lines = ['{"round": 1}', '{"round": 2}', '{"round": 3}', '{"rou']  # killed mid-write
    (tmp_path / "rounds.jsonl").write_text("\n".join(lines))
    done, arrays, _ = writer.load_checkpoint()
    assert done == 2 and list(arrays) == ["w"]
    assert (tmp_path / "rounds.jsonl").read_text() == '{"round": 1}\n{"round": 2}\n'
    (tmp_path / "rounds.jsonl").write_text('{"round": 1}\nnot json\n{"round": 2}\n')
    with pytest.raises(ConfigError, match="line 2 is not JSON; repair it"):
        writer.load_checkpoint()
