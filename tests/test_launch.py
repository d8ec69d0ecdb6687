"""The launcher's process handling: a managed SuperLink's tree stopped (a stand-in tree), and
`run_app` following a run to its end against a stand-in `flwr` on PATH that plays the SuperLink:
it starts a run that writes its files, streams the log until the run finishes (or drops it, or
never ends it) and answers `flwr list` with the run's status. No Flower needed."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pfedgm_app.records.run_folder import FORMAT_VERSION, RunFolder
from pfedgm_cli.flwr_cli import run_app, run_config_arg
from pfedgm_cli.superlink import stop_local_superlink, superlink_tree


@pytest.mark.slow  # real processes and waits
def test_stop_local_superlink_kills_the_whole_tree(tmp_path):
    """A 'flower-superlink' naming this FLWR_HOME and its child both go; others are untouched."""
    home = tmp_path / "flwr-home"
    script = f"sleep 300 & wait  # flower-superlink --database {home}/local-superlink/state.db"
    root = subprocess.Popen(["bash", "-c", script])
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        for _ in range(50):
            tree = superlink_tree(home)
            if len(tree) >= 2:
                break
            time.sleep(0.1)
        assert root.pid in tree and len(tree) >= 2 and bystander.pid not in tree
        assert stop_local_superlink(home) == len(tree)
        root.wait(timeout=10)
        assert superlink_tree(home) == set() and bystander.poll() is None
    finally:
        for proc in (root, bystander):
            proc.kill()


def test_run_config_arg_quotes_strings():
    assert run_config_arg({"method": "fedavg", "lambda": 1.0, "seed": 3}) == (
        "method='fedavg' lambda=1.0 seed=3"
    )


# The stand-in `flwr`. Its plan (plan.json): `stream` "follows" (the log stream ends when the run
# does, as the SuperLink's), "drops" (ends at once) or "hangs"; `rows` rounds the run writes, one
# every 50 ms (none: no run, forever "running"), after `flwr list` was first asked when `start`
# is "after-first-list"; then its summary and status `finished:completed`. Each call is a line of
# `calls`; `flwr list` records the status it answers, the rows written and whether the summary is.
FAKE_FLWR = """
import json, os, subprocess, sys, time
from pathlib import Path

STATE = Path(os.environ["FAKE_FLWR_STATE"])
PLAN = json.loads((STATE / "plan.json").read_text())


def record(event):
    with open(STATE / "calls", "a") as f:
        f.write(event + "\\n")


def status():
    done = STATE / "status"
    return done.read_text() if done.exists() else "running"


def run():
    (STATE / "play.pid").write_text(str(os.getpid()))
    waited = time.time() + 60  # a stand-in left behind by a failed test ends on its own
    while PLAN["start"] == "after-first-list" and not (STATE / "listed").exists():
        if time.time() > waited:
            return
        time.sleep(0.01)
    rounds = Path(PLAN["rounds"])
    rounds.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(PLAN["rows"]):
        with rounds.open("a") as f:
            f.write("{}\\n")
        time.sleep(0.05)
    Path(PLAN["summary"]).write_text(PLAN["summary-text"])
    (STATE / "status").write_text("finished:completed")


command = sys.argv[1]
if command == "run":
    record("run")
    if PLAN["rows"] is not None:
        # detached from `flwr run`'s pipes, which its caller reads to their end
        subprocess.Popen([sys.executable, __file__, "play"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    print(json.dumps({"success": True, "run-id": 7}))
elif command == "play":
    run()
elif command == "log" and "--show" in sys.argv:
    record("log --show")
    print("the run's log")
elif command == "log":
    (STATE / "stream.pid").write_text(str(os.getpid()))
    record("stream")
    while PLAN["stream"] == "hangs" or (
        PLAN["stream"] == "follows" and not status().startswith("finished")
    ):
        time.sleep(0.05)
    record("stream ended")
elif command == "list":
    rounds, summary = Path(PLAN["rounds"]), Path(PLAN["summary"])
    rows = len(rounds.read_text().splitlines()) if rounds.exists() else 0
    now = status()
    record(json.dumps({"list": now, "rows": rows, "summary": summary.exists()}))
    (STATE / "listed").touch()
    runs = [{"run-id": "7", "status": now, "status-details": ""}]
    print(json.dumps({"success": True, "runs": runs}))
else:
    record(command)
"""


@pytest.fixture
def fake_flwr(tmp_path, monkeypatch):
    """Puts the stand-in `flwr` first on PATH; returns `play(plan, timeout)`, which runs
    `run_app` against it and returns the run and the calls it saw, in order."""
    bin_dir, state = tmp_path / "bin", tmp_path / "flwr-state"
    bin_dir.mkdir()
    state.mkdir()
    flwr = bin_dir / "flwr"
    flwr.write_text(f"#!{sys.executable}\n{FAKE_FLWR}")
    flwr.chmod(flwr.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = RunFolder(tmp_path / "run")

    def play(timeout: float = 60, **plan):
        plan = {"stream": "follows", "rows": 5, "start": "at-once", **plan}
        plan |= {"rounds": str(out.rounds), "summary": str(out.summary)}
        plan["summary-text"] = json.dumps(
            {"method": "fedavg", "mean-accuracy": 50.0, "format-version": FORMAT_VERSION}
        )
        (state / "plan.json").write_text(json.dumps(plan))
        env = {**os.environ, "FAKE_FLWR_STATE": str(state)}
        run = run_app({"output-dir": str(out.path)}, 2, env, timeout=timeout)
        calls = (state / "calls").read_text().splitlines()
        return run, [json.loads(c) if c.startswith("{") else c for c in calls], state

    yield play
    if (pid := state / "play.pid").exists():  # a run a failed test left going
        try:
            os.kill(int(pid.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _lists(calls: list) -> list[dict]:
    return [c for c in calls if isinstance(c, dict)]


@pytest.mark.slow  # real processes and waits
def test_a_run_is_followed_by_its_log_stream_and_asked_about_once_at_its_end(fake_flwr, tmp_path):
    """`flwr list` is a process that takes CPU from the run: while the log stream runs, nothing
    asks it; when the SuperLink ends the stream, one `flwr list` gives the finished status."""
    run, calls, _ = fake_flwr()
    assert run.ok and run.status == "finished:completed" and run.details == ""
    assert run.summary and run.summary == RunFolder(tmp_path / "run").read_summary()
    assert [c if isinstance(c, str) else "list" for c in calls] == [
        "run", "stream", "stream ended", "list", "log --show"
    ]  # fmt: skip
    assert "the run's log" in run.log


@pytest.mark.slow  # real processes and waits
def test_a_stream_that_drops_leaves_the_wait_to_flwr_list_which_spares_a_writing_run(fake_flwr):
    """The stream ends before the run (a dropped connection): `flwr list` is asked at once, finds
    the run going, and is not asked again while the run keeps writing its rounds, only once
    its summary is there."""
    run, calls, _ = fake_flwr(stream="drops", rows=30, start="after-first-list")
    assert run.ok and run.summary
    first, *later = _lists(calls)
    assert first == {"list": "running", "rows": 0, "summary": False}
    assert later and all(c["summary"] for c in later), later
    assert later[-1]["list"] == "finished:completed"


@pytest.mark.slow  # real processes and waits
def test_a_run_still_going_at_the_deadline_is_stopped_and_its_stream_ended(fake_flwr):
    run, calls, state = fake_flwr(stream="hangs", rows=None, timeout=1)
    assert run.status == "timeout (running)" and not run.ok and run.summary == {}
    names = [c if isinstance(c, str) else "list" for c in calls]
    assert names[:4] == ["run", "stream", "list", "stop"] and "stream ended" not in names
    stream = int((state / "stream.pid").read_text())
    assert not Path(f"/proc/{stream}").exists()  # killed and reaped, not left behind
