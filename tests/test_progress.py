"""The log's line per round (records/progress.py): the figures of the round's rounds.jsonl
line, and the time left at the sitting's pace."""

from __future__ import annotations

from pfedgm_app.records.progress import clock, round_line


def test_a_rounds_line_holds_its_figures_and_the_time_left_at_the_sittings_pace():
    row = {"round": 3, "loss": 1.2345, "loss-shared": 1.1, "loss-personalized": 0.3,
           "num-clients": 30, "replies-dropped": 1, "updates-clipped": 2, "seconds": 12.3,
           "seconds-elapsed": 400.0, "personalized-accuracy": 55.2, "dp-epsilon": 3.21}  # fmt: skip
    line = round_line(row, last=200, sitting_rounds=3, sitting_seconds=36.0)
    assert line.startswith("round 3/200: loss 1.234 (H 1.1, R_c 0.3)")
    for figure in ("30 used", "1 dropped", "2 clipped", "epsilon 3.21", "55.20 %", "12.3 s"):
        assert figure in line, figure
    assert "6:40 so far" in line and f"{clock(12.0 * 197)} left" in line  # 12 s a round


def test_a_round_without_training_figures_still_says_its_time():
    line = round_line({"round": 2, "seconds": 1.0}, last=2, sitting_rounds=1, sitting_seconds=5.0)
    assert line == "round 2/2: 1.0 s, 0:00 so far, 0:00 left"
    assert clock(3725) == "1:02:05" and clock(59.6) == "1:00"
