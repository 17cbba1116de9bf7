"""The container tooling's pure parts: cache keys that follow content, the override's shape, the engine's refusal
messages. The tooling itself runs for real in tests/containers/ (where an engine can be started)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from localstack import compose, engine, images


def test_worker_image_tag_follows_the_build_context_and_nothing_else(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / "deploy").mkdir(parents=True)
    for entry in (*images.PRODUCT_CONTEXT, "tests", "localstack"):
        if "." in entry:
            (repo / entry).write_text(entry)
        else:
            (repo / entry).mkdir()
            (repo / entry / "__init__.py").write_text("")
    (repo / "deploy" / "Dockerfile").write_text("FROM x\n")
    (repo / ".dockerignore").write_text("*\n")
    monkeypatch.setattr(images, "REPO", repo)
    monkeypatch.setattr(images, "DOCKERFILE", repo / "deploy" / "Dockerfile")
    wheels = tmp_path / "wheels-abc"
    before = images.worker_tag("base:1", wheels)
    assert before == images.worker_tag("base:1", wheels), "deterministic"
    assert images.worker_tag("base:2", wheels) != before, "another base image"
    assert images.worker_tag("base:1", tmp_path / "wheels-def") != before, "other wheels"
    # Files outside the context (tests/, a dev room, bytecode) do not change it; one inside does.
    (repo / "tests" / "test_x.py").write_text("x = 1\n")
    (repo / "localstack" / "stack.py").write_text("x = 1\n")
    (repo / "worker" / "__pycache__").mkdir()
    (repo / "worker" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0")
    assert images.worker_tag("base:1", wheels) == before
    (repo / "worker" / "cli.py").write_text("x = 1\n")
    assert images.worker_tag("base:1", wheels) != before
    (repo / "deploy" / "Dockerfile").write_text("FROM y\n")
    assert images.worker_tag("base:1", wheels) not in (before,)


def test_base_tag_names_its_recipe() -> None:
    tag = images.base_tag()
    assert tag.startswith(f"{images.BASE_REPOSITORY}:{images.BASE_SUITE}-") and tag == images.base_tag()


def test_the_local_images_override_replaces_only_what_cannot_be_pulled() -> None:
    base = yaml.safe_load(compose.COMPOSE_FILE.read_text())["services"]
    override = yaml.load(compose.OVERRIDE_FILE.read_text(), Loader=_ComposeLoader)["services"]
    assert set(override) <= set(base)
    off = {name for name, svc in override.items() if svc.get("profiles") == ["official-images"]}
    assert off == {"postgresql", "temporal-schema", "temporal-ui"}
    for name in ("temporal", "temporal-setup", "worker"):
        assert override[name]["network_mode"] == "host" and override[name]["pull_policy"] == "never", name
    assert "${GROVE_TEMPORAL_WORKER_IMAGE" in override["worker"]["image"]
    assert "${GROVE_TEMPORAL_TEMPORAL_IMAGE" in override["temporal"]["image"]
    # The worker keeps docker-compose.yml's hardening: nothing here loosens it.
    assert not {"read_only", "cap_drop", "security_opt", "user", "tmpfs"} & set(override["worker"])


class _ComposeLoader(yaml.SafeLoader):
    """YAML with compose's `!reset` / `!override` tags."""


_ComposeLoader.add_constructor("!reset", lambda loader, node: None)
_ComposeLoader.add_constructor("!override", lambda loader, node: loader.construct_object(node))


def test_no_engine_and_not_root_is_one_clear_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "probe", lambda host=None, timeout=10.0: None)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(engine.os, "geteuid", lambda: 1000)
    with pytest.raises(engine.EngineUnavailableError, match=r"no Docker Engine answers at unix:///var/run/docker.sock, "
                                                             r"and starting one \(dockerd\) needs root"):
        engine.ensure_engine(print)
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    with pytest.raises(engine.EngineUnavailableError, match="no Docker Engine answers at DOCKER_HOST=tcp://"):
        engine.ensure_engine(print)


def test_a_missing_kubeconfig_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GROVE_TEMPORAL_KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(compose.KubeconfigMissingError, match=r"absent \(GROVE_TEMPORAL_KUBECONFIG\) does not exist"):
        compose._default_kubeconfig()
    monkeypatch.delenv("GROVE_TEMPORAL_KUBECONFIG")
    given = tmp_path / "kubeconfig"
    given.write_text("apiVersion: v1\n")
    monkeypatch.setenv("KUBECONFIG", f"{given}{':'}{tmp_path / 'other'}")
    assert compose._default_kubeconfig() == given
