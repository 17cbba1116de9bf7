"""The unsettled-round diagnosis names, per pod not Ready, what holds it (pure: pods as the apiserver returns them)."""

from __future__ import annotations

from datetime import UTC, datetime

from faults.diagnose import SHOWN, unready_pod_lines

NOW = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)


def _pod(name: str, *, ready: bool, **status: object) -> dict[str, object]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False",
                   **({} if ready else {"reason": "ContainersNotReady"})}]
    conditions += status.pop("conditions", [])  # type: ignore[arg-type]
    return {"metadata": {"name": name, "creationTimestamp": "2026-11-26T07:57:00Z"},
            "spec": status.pop("spec", {}), "status": {"phase": status.pop("phase", "Running"),
                                                        "conditions": conditions}}


def test_ready_pods_are_left_out_and_the_rest_say_what_holds_them() -> None:
    pods = [
        _pod("a-ready", ready=True, spec={"nodeName": "n1"}),
        _pod("b-unscheduled", ready=False, phase="Pending", conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes available"}]),
        _pod("c-gated", ready=False, phase="Pending", spec={"schedulingGates": [{"name": "grove.io/podgang"}]}),
        _pod("d-probe", ready=False, spec={"nodeName": "n2"}),
    ]
    lines = unready_pod_lines(pods, NOW)
    assert len(lines) == 3 and not any("a-ready" in line for line in lines)
    assert "unscheduled: Unschedulable 0/3 nodes available" in lines[0] and "age 180s" in lines[0]
    assert "gates grove.io/podgang" in lines[1]
    assert "node n2" in lines[2] and "not Ready: ContainersNotReady" in lines[2]


def test_a_long_list_is_cut_and_says_how_many_more() -> None:
    lines = unready_pod_lines([_pod(f"p{i:02d}", ready=False) for i in range(SHOWN + 3)], NOW)
    assert len(lines) == SHOWN + 1 and lines[-1] == "... and 3 more pods not Ready"
    assert unready_pod_lines([_pod("ok", ready=True)], NOW) == ["every pod is Ready"]
