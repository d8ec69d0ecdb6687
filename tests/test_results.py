"""What a run writes: a finished run is never overwritten, an unfinished one is set aside."""

from __future__ import annotations

import pytest

from pfedgm_app.config import ConfigError, RunConfig
from pfedgm_app.results import RunWriter


def test_a_finished_run_is_never_overwritten(tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(ConfigError, match="already holds a finished run"):
        RunWriter.create(RunConfig(output_dir=str(tmp_path)))
    assert (tmp_path / "summary.json").read_text() == "{}"


def test_an_unfinished_run_is_set_aside_and_the_new_one_starts_clean(tmp_path):
    (tmp_path / "config.json").write_text("old config")
    (tmp_path / "rounds.jsonl").write_text('{"round": 1}\n{"round": 2}\n')
    writer = RunWriter.create(RunConfig(output_dir=str(tmp_path)))
    writer.append_round(1, None)
    rounds = (tmp_path / "rounds.jsonl").read_text().splitlines()
    assert rounds == ['{"round": 1}']  # not a continuation of the stopped run
    (kept,) = tmp_path.glob("unfinished-*")
    assert (kept / "rounds.jsonl").read_text().count("round") == 2  # nothing lost
    assert (kept / "config.json").read_text() == "old config"
    (tmp_path / "config.json").write_text("second stopped run")  # stopped again, same second
    RunWriter.create(RunConfig(output_dir=str(tmp_path)))
    kept_twice = sorted(tmp_path.glob("unfinished-*"))
    assert len(kept_twice) == 2  # the first set-aside run is not overwritten
    assert (kept / "config.json").read_text() == "old config"


def test_a_fresh_output_dir_is_created(tmp_path):
    target = tmp_path / "a" / "b"
    RunWriter.create(RunConfig(output_dir=str(target)))
    assert target.is_dir() and not list(target.iterdir())
