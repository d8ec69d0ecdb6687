"""`run_app` against what `flwr` prints, recorded (no SuperLink is started): a SuperLink that
was restarted or lost its database no longer knows the run, and says so in many ways (an
error, no `runs`, an empty list, no JSON); the run then ends `unknown` with one line saying
where its files are and how to resume it, never a KeyError. A run `flwr run` did not submit
is one line too."""

from __future__ import annotations

import json
import subprocess

import pytest

from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli import flwr_cli
from pfedgm_cli.flwr_calls import flwr_json, parse_listed
from pfedgm_cli.flwr_cli import run_app

SUBMITTED = '{"success": true, "run-id": 4217}'
# `flwr list --run-id 4217 --format json` (Flower 1.42; after its progress line, pretty-printed)
LISTED = """🔍 Displaying information for run ID 4217...
{
  "success": true,
  "runs": [
    {
      "run-id": "4217",
      "federation-id": "",
      "fab-id": "pfedgm/pfedgm-app",
      "fab-name": "pfedgm-app",
      "fab-version": "1.0.0",
      "fab-hash": "0c5f3a1b",
      "status": "finished:completed",
      "status-details": "",
      "elapsed": "00:01:12",
      "pending-at": "2025-01-01 10:00:00Z",
      "starting-at": "2025-01-01 10:00:01Z",
      "running-at": "2025-01-01 10:00:02Z",
      "finished-at": "2025-01-01 10:01:14Z",
      "network-traffic": {"inbound-bytes": 10, "outbound-bytes": 20, "total-bytes": 30},
      "compute-time": {"serverapp-seconds": 1.0, "clientapp-seconds": 2.0, "total-seconds": 3.0}
    }
  ]
}"""
# What a SuperLink that does not know run 4217 answers, one way or another.
UNKNOWN = {
    "not found": json.dumps(
        {
            "success": False,
            "error-message": "Displaying information for run ID 4217...\nRun ID 4217 not found",
        },
        indent=2,
    ),  # fmt: skip
    "no runs": '{"success": true}',
    "empty runs": '{"success": true, "runs": []}',
    "another run": LISTED.replace('"4217"', '"99"'),
    "no status": '{"success": true, "runs": [{"run-id": "4217"}]}',
    "runs not a list": '{"success": true, "runs": {"4217": {"status": "running"}}}',
    "not json": "Connection refused: is the SuperLink running at 127.0.0.1:39093?",
    "empty": "",
    "a json list": "[]",
}


class RecordedFlwr:
    """Stands in for the `flwr` CLI: `run` prints `submitted`, `list` the next of `listed` (the
    last one again once they are used up), `log` and `stop` nothing."""

    def __init__(self, listed: list[str], submitted: str = SUBMITTED, log: str = ""):
        self.listed, self.submitted, self.log, self.calls = list(listed), submitted, log, []

    def __call__(self, args, env, check=True, timeout=None):
        self.calls.append(args[0])
        out = {"run": self.submitted, "list": self.listed[0], "log": self.log}.get(args[0], "")
        if args[0] == "list" and len(self.listed) > 1:
            self.listed.pop(0)
        return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")


@pytest.fixture
def recorded(monkeypatch):
    def install(listed, submitted=SUBMITTED, log=""):
        fake = RecordedFlwr(listed, submitted, log)
        monkeypatch.setattr(flwr_cli, "flwr", fake)
        monkeypatch.setattr(flwr_cli, "flwr_command", lambda: "true")  # `flwr log` ends at once
        return fake

    return install


def test_flwr_json_reads_the_object_after_a_progress_line():
    assert flwr_json(LISTED)["runs"][0]["run-id"] == "4217"
    assert flwr_json(SUBMITTED) == {"success": True, "run-id": 4217}


# Answers `flwr --format json` may give that hold no JSON object.
NO_OBJECT = {
    "text": "Connection refused",
    "empty": "",
    "a list": "[]",
    "a list holding a brace": '["{"]',
    "braces in text": "Error: {not json}",
    "cut short": '{"success": true',
    "nested too deep": '{"a": ' + "[" * 100_000,
}


@pytest.mark.parametrize("answer", NO_OBJECT.values(), ids=NO_OBJECT.keys())
def test_flwr_json_of_an_answer_that_is_no_json_object_is_empty(answer):
    assert flwr_json(answer) == {}


def test_the_listing_of_a_known_run_gives_its_status():
    assert parse_listed(LISTED, "4217")["status"] == "finished:completed"


@pytest.mark.parametrize("answer", UNKNOWN.values(), ids=UNKNOWN.keys())
def test_a_listing_that_does_not_hold_the_run_gives_nothing(answer):
    assert parse_listed(answer, "4217") == {}


@pytest.mark.parametrize("finished", [False, True], ids=["stopped", "finished"])
def test_a_run_the_superlink_no_longer_knows_ends_unknown_with_one_line(
    recorded, tmp_path, finished
):
    """Every way of not knowing the run, one after the other: `unknown` after three answers in
    a row, with where its files are and, unless it finished, how to resume it."""
    if finished:
        RunFolder(tmp_path).write_summary({"mean-accuracy": 50.0})
    fake = recorded(list(UNKNOWN.values()))
    run = run_app({"output-dir": str(tmp_path)}, 2, {})
    assert (run.run_id, run.status, run.ok) == ("4217", "unknown", False)
    assert fake.calls.count("list") == 3 and "stop" not in fake.calls
    assert "\n" not in run.details and str(tmp_path) in run.details
    assert "unknown to this SuperLink" in run.details
    assert ("resume=true" in run.details) is not finished
    assert run.summary == ({"mean-accuracy": 50.0, "format-version": 2} if finished else {})


def test_a_listing_that_fails_once_while_the_superlink_restarts_is_asked_again(recorded, tmp_path):
    fake = recorded([UNKNOWN["not json"], LISTED])
    run = run_app({"output-dir": str(tmp_path)}, 2, {})
    assert (run.status, run.ok, run.details) == ("finished:completed", True, "")
    assert fake.calls.count("list") == 2


FAILED = LISTED.replace('"finished:completed"', '"finished:failed"').replace(
    '"status-details": ""', '"status-details": "ServerApp exited"'
)
APP_ERROR = (
    "INFO :      [ROUND 1/2]\n"
    "ERROR :     pFedGM app: client 3: ValueError: a round's model holds NaN\n"
    "ERROR :     pFedGM app: no round could aggregate a reply; the first cause: client 3\n"
    "ERROR :     Exit Code: 600\n"
)


@pytest.mark.parametrize(
    ("log", "why"),
    [(APP_ERROR, "pFedGM app: no round could aggregate a reply; the first cause: client 3"),
     ("INFO : [ROUND 1/2]\n", "ServerApp exited")],
    ids=["the app said why", "the SuperLink said why"],
)  # fmt: skip
def test_a_failed_run_says_why_in_one_line_the_apps_own_first(recorded, tmp_path, log, why):
    recorded([FAILED], log=log)
    run = run_app({"output-dir": str(tmp_path)}, 2, {})
    assert (run.status, run.ok, run.details) == ("finished:failed", False, why)


@pytest.mark.parametrize(
    ("submitted", "why"),
    [
        ("Error: federation 'remote' is not in config.toml\n", "federation 'remote' is not"),
        ('{"success": false, "error-message": "Loading project...\\nInvalid run config"}',
         "Invalid run config"),
        ('{"success": true}', "no run-id"),
        ('{"success": true, "run-id": null}', "no run-id"),
        ("", "no output"),
    ],
    ids=["not json", "error", "no run-id", "null run-id", "nothing"],
)  # fmt: skip
def test_a_run_flwr_did_not_submit_is_one_line(recorded, tmp_path, submitted, why):
    recorded([LISTED], submitted)
    with pytest.raises(RuntimeError) as err:
        run_app({"output-dir": str(tmp_path)}, 2, {})
    assert "\n" not in str(err.value) and why in str(err.value), str(err.value)
    assert str(err.value).startswith("flwr run did not submit the run")
