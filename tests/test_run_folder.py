"""A run's folder: each file under the name docs/outputs.md gives it, a run finished or stopped
by what it left, and one tolerant reading of `rounds.jsonl`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.settings import ConfigError

OUTPUTS = Path(__file__).resolve().parents[1] / "docs" / "outputs.md"


def test_each_file_has_the_name_docs_outputs_md_gives_it(tmp_path):
    folder = RunFolder(tmp_path)
    files = [folder.config, folder.rounds, folder.plot, folder.checkpoint, folder.global_model,
             folder.clients, folder.models, folder.summary]  # fmt: skip
    listed = re.findall(r"^\| `([^`/]+)[^`]*` \|", OUTPUTS.read_text(), re.MULTILINE)
    assert [p.name for p in files] == listed  # models/: the folder of client-<id>.safetensors
    assert {p.parent for p in files} == {tmp_path}


def test_a_checkpoint_without_a_summary_is_a_stopped_run_and_a_summary_a_finished_one(tmp_path):
    folder = RunFolder(tmp_path)
    assert not folder.finished and not folder.stopped
    folder.checkpoint.write_bytes(b"")
    assert folder.stopped and not folder.finished
    folder.summary.write_text("{}")
    assert folder.finished and not folder.stopped


def test_rounds_drop_a_torn_last_line_and_refuse_a_bad_line_before_it(tmp_path):
    folder = RunFolder(tmp_path)
    assert folder.read_rounds() == []  # none written yet
    folder.rounds.write_text('{"round": 1}\n{"round": 2}\n{"rou')  # killed mid-write
    assert folder.read_rounds() == [{"round": 1}, {"round": 2}]
    folder.rounds.write_text('{"round": 1}\nnot json\n{"round": 2}\n')
    with pytest.raises(ConfigError, match="line 2 is not JSON; repair it"):
        folder.read_rounds()
