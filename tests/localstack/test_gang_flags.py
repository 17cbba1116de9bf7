"""The stack's switch for Kubernetes' own gang scheduling: which flags each control-plane process gets (the real
behaviour with them on is tests/localstack/test_native_gang_scheduling.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from localstack.kube import ApiServer, ControllerManager, Scheduler
from localstack.kubeconfig import KubeUser
from localstack.processes import ProcessRegistry
from localstack.stack import StackOptions


def _argvs(tmp_path: Path, gangs: bool) -> dict[str, list[str]]:
    registry = ProcessRegistry(tmp_path)
    pki: Any = SimpleNamespace(**{k: tmp_path / k for k in (
        "apiserver_cert", "apiserver_key", "ca_cert", "ca_key", "front_proxy_client_cert", "front_proxy_client_key",
        "service_account_pub", "service_account_key")})
    etcd: Any = SimpleNamespace(client_url="http://127.0.0.1:1")
    binary = tmp_path / "bin"
    return {
        "kube-apiserver": ApiServer(binary, tmp_path, registry, etcd, pki, tmp_path / "tokens.csv", KubeUser("a"),
                                    gang_scheduling=gangs).process.argv,
        "kube-scheduler": Scheduler(binary, tmp_path, registry, gang_scheduling=gangs).process.argv,
        "kube-controller-manager": ControllerManager(binary, tmp_path, registry, pki,
                                                     gang_scheduling=gangs).process.argv,
    }


def test_gang_scheduling_is_on_by_default() -> None:
    assert StackOptions().gang_scheduling is True


@pytest.mark.parametrize("gangs", [True, False])
def test_gates_and_api_group_follow_the_option(tmp_path: Path, gangs: bool) -> None:
    argvs = _argvs(tmp_path, gangs)
    expected = {
        "kube-apiserver": ["--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true"],
        "kube-scheduler": ["--feature-gates=GenericWorkload=true,GangScheduling=true,SchedulerPopFromBackoffQ=false"],
        "kube-controller-manager": ["--feature-gates=GenericWorkload=true"],
    }
    for component, flags in expected.items():
        gang_flags = [a for a in argvs[component] if a.startswith(("--feature-gates", "--runtime-config"))]
        assert gang_flags == (flags if gangs else []), component
