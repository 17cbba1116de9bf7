"""`python -m tests.e2e.broken_build worker …`: the grove-temporal CLI of a deliberately broken worker build, whose
replica workflow is tests/e2e/broken_workflow.py's build named by $GROVE_TEMPORAL_BROKEN_BUILD (`extra-timer` or
`raise`). Everything else (activities, watcher, reconciler, endpoint) is the real worker."""

from __future__ import annotations

import os

import worker.app
from tests.e2e.broken_workflow import BUILDS
from workflows.reconciler import ReconcilerWorkflow

BUILD_ENV = "GROVE_TEMPORAL_BROKEN_BUILD"

if __name__ == "__main__":
    worker.app.WORKFLOWS = [BUILDS[os.environ[BUILD_ENV]], ReconcilerWorkflow]
    from worker.cli import main

    main()
