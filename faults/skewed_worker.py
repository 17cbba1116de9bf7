"""`python -m faults.skewed_worker SECONDS worker ...`: a worker process whose wall clock is SECONDS off.

time-machine moves this process's time.time(), datetime.now() and their kin (not the monotonic clocks, which
timeouts and the Lease's expiry use); the Temporal server, kube-apiserver, KWOK and the other workers keep the true
time. It stands for a worker on a node whose clock has drifted: whatever this worker stamps (nudges, reads, Lease
renewals, Events) is off by SECONDS, and no decision may rest on comparing it with another process's clock.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta


def main() -> None:
    import time_machine

    from worker import cli

    skew, args = float(sys.argv[1]), sys.argv[2:]
    travel = time_machine.travel(datetime.now(UTC) + timedelta(seconds=skew), tick=True)
    travel.start()
    try:
        sys.argv = ["grove-temporal", *args]
        cli.main()
    finally:
        travel.stop()


if __name__ == "__main__":
    main()
