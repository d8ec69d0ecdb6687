"""The simulation engine's threads yield to the ClientApps (`pfedgm_app/engine.py`)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pfedgm_app.engine import in_simulation_engine, lower_priority

# In a fresh process (a nice value cannot be lowered back without privileges): two threads
# already running, then lower_priority, then a thread started afterwards by the main thread.
PROBE = textwrap.dedent(
    """
    import json, os, threading
    from pfedgm_app.engine import lower_priority
    stop, tids = threading.Event(), []
    def wait():
        tids.append(threading.get_native_id())
        stop.wait()
    before = [threading.Thread(target=wait) for _ in range(2)]
    for t in before:
        t.start()
    while len(tids) < 2:
        pass
    os.setpriority(os.PRIO_PROCESS, tids[1], 12)  # one already above the target keeps its value
    changed = lower_priority(7)
    after = threading.Thread(target=wait)
    after.start()
    while len(tids) < 3:
        pass
    nice = {str(t): os.getpriority(os.PRIO_PROCESS, t) for t in [threading.get_native_id(), *tids]}
    stop.set()
    print(json.dumps({"changed": changed, "nice": nice, "tids": tids}))
    """
)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread nice is Linux's")
def test_lower_priority_reaches_every_thread_and_those_started_after():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    nice, (first, second, later) = result["nice"], result["tids"]
    assert nice[str(first)] == 7 and nice[str(later)] == 7  # running before, started after
    assert nice[str(second)] == 12  # was already lower in priority: kept
    assert all(v >= 7 for v in nice.values()), nice  # the main thread too
    assert result["changed"] >= 2  # the main thread and the first waiter at least


def test_lower_priority_rejects_values_outside_nice_range():
    for bad in (-1, 20):
        with pytest.raises(ValueError, match="nice must lie in"):
            lower_priority(bad)


def test_only_flowers_simulation_process_counts_as_the_engine():
    assert not in_simulation_engine()  # pytest, the in-process driver: never reniced
