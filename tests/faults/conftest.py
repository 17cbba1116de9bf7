"""The fault runner's diagnosis tests use the workflow tests' Temporal dev server (real, no Kubernetes)."""

from tests.workflows.conftest import dev_server  # noqa: F401  (a fixture, used by name)
