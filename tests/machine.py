"""How slow this machine is now, for the few wall-clock bounds a test cannot do without.

A bound that real time must meet (a server's start, a child's exit, a scrape over loopback)
is written for this project's development machine, idle, and `scaled(seconds)` stretches
it for the machine the test runs on: by its single core's speed (a fixed pure-Python
workload timed once per session against `REFERENCE_S`, below) times its load (the
one-minute load average per core, when above one; the timed runs share the cores with that
load, so the speed is read net of it). The CI machine class is 1.7-1.9x
slower per core and shares its two cores; a bound `scaled()` never shrinks, so a fast idle
machine waits no longer than before. `STALLKIT_TEST_SLOWDOWN` (a number) replaces the
measured factor, for a run pinned to one core or under a profiler. Assertions about
*when* something happens belong on the virtual clock or a fake clock instead; this module
is for timeouts that only fire when something is wrong.
"""

from __future__ import annotations

import functools
import os
import time

__all__ = ["REFERENCE_S", "load_factor", "scaled", "slowdown", "speed_factor"]

#: best of 9 runs of `_workload()` on the development machine (Intel Xeon, AVX-512, 2
#: cores, Python 3.11), measured with the machine otherwise idle: 16.3-17.1 ms over six
#: sessions. A machine whose best run takes twice that is twice as slow per core.
REFERENCE_S = 0.0165
#: past this the machine is unfit for wall-clock tests; a bound stretched further would
#: only turn a clear failure into pytest's 180 s timeout
MAX_FACTOR = 10.0
SLOWDOWN_ENV = "STALLKIT_TEST_SLOWDOWN"


def _workload() -> int:
    """A fixed pure-Python workload (integer arithmetic, a dict, string formatting): what
    the simulator, the monitor's parsing and the event loop spend their time on."""
    total = 0
    table: dict[int, str] = {}
    for i in range(60_000):
        total += (i * i) % 7
        table[i % 512] = f"{i:x}"
    return total + len(table)


@functools.cache
def speed_factor() -> float:
    """This core's slowness against the reference (>= 1): the best of 9 timed runs, taken
    once per session (the best run is the core's speed; the load is counted apart)."""
    runs = []
    for _ in range(9):
        start = time.perf_counter()
        _workload()
        runs.append(time.perf_counter() - start)
    return max(1.0, min(runs) / REFERENCE_S)


def load_factor() -> float:
    """The one-minute load average per core (>= 1): how many runnable processes share each
    core now. Read at each call, as the load moves during a session."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not every platform has it
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def slowdown() -> float:
    """How much slower than the idle reference machine this one runs now (1 to MAX_FACTOR);
    `STALLKIT_TEST_SLOWDOWN`, when set, instead."""
    fixed = os.environ.get(SLOWDOWN_ENV)
    if fixed:
        return max(1.0, float(fixed))
    # The timed runs share the cores with the load, so the measured factor already holds up
    # to `load` of contention: the core's own slowness is at least measured / load, and that
    # times the load is the larger of the two (a product would count the load twice: 10x on
    # this machine at a load of 3.6 per core, where the tests ran 3-4x slower).
    measured, load = speed_factor(), load_factor()
    return min(MAX_FACTOR, max(1.0, measured / load) * load)


def scaled(seconds: float) -> float:
    """The wall-clock bound `seconds` (written for the idle reference machine) for this
    machine now; never smaller than `seconds`."""
    return seconds * slowdown()
