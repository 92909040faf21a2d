"""`render lws` against the LeaderWorkerSet v1 schema (pinned from the project's CRD), with no field the API
server would prune; `render systemd` for one node's rank."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from launcher.cli import main
from launcher.config.flags import SHIPPED_VERSION
from launcher.config.load import loads
from launcher.deploy import render
from launcher.deploy.systemd_plan import STOP_MARGIN_S, drop_in
from launcher.errors import ConfigError
from tests.conftest import ROOT
from tests.helpers.profiles import TWO_NODES as TWO

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "data" / "k8s" / "leaderworkerset-v1.schema.json")
                    .read_text())["schema"]


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Keys the schema does not declare: Kubernetes drops them silently, so a typo would never fail."""
    found: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                found += unknown_fields(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += unknown_fields(item, extra, f"{path}.{key}")
            elif properties is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                found.append(f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for n, item in enumerate(value):
            found += unknown_fields(item, schema["items"], f"{path}[{n}]")
    return found


@pytest.fixture
def documents() -> list[dict[str, Any]]:
    text = render.lws_text(render.lws_manifest(loads(TWO, name="llama70b"), TWO, image="registry/vllm-launch:1",
                                               namespace="serving"), "vllm-llama70b-secrets")
    return list(yaml.safe_load_all(text))


def test_the_leaderworkerset_is_valid_and_prunes_nothing(documents: list[dict[str, Any]]) -> None:
    config_map, lws, service = documents
    jsonschema.validate(lws, SCHEMA)
    assert [] == unknown_fields(lws, SCHEMA)
    spec = lws["spec"]["leaderWorkerTemplate"]
    assert (spec["size"], spec["restartPolicy"]) == (2, "RecreateGroupOnPodRestart")
    leader = spec["leaderTemplate"]["spec"]["containers"][0]
    worker = spec["workerTemplate"]["spec"]["containers"][0]
    for container in (leader, worker):
        assert container["command"][:3] == ["vllm-launch", "up", "/etc/vllm-launch/llama70b.yaml"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
        assert {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "vllm-llama70b-secrets",
                                                                       "key": "api_key"}}} in container["env"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert leader["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000} and "readinessProbe" not in worker
    volumes = spec["leaderTemplate"]["spec"]["volumes"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in volumes
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": "vllm-llama70b", "role": "leader"}
    assert service["spec"]["ports"][0]["port"] == 8000 and lws["metadata"]["namespace"] == "serving"
    pod_profile = yaml.safe_load(config_map["data"]["llama70b.yaml"])
    assert pod_profile["nodes"]["master_addr"] == {"env": "LWS_LEADER_ADDRESS"}
    assert "secret" not in json.dumps(config_map).lower().replace("secrets", ""), "no secret value inline"


def test_a_schema_violation_is_caught(documents: list[dict[str, Any]]) -> None:
    """The check can fail: a size given as text, and a misspelt field, are both found."""
    lws = documents[1]
    lws["spec"]["leaderWorkerTemplate"]["size"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(lws, SCHEMA)
    lws["spec"]["leaderWorkerTemplate"]["size"] = 2
    lws["spec"]["leaderWorkerTemplate"]["restartPolcy"] = "None"
    assert [".spec.leaderWorkerTemplate.restartPolcy"] == unknown_fields(lws, SCHEMA)


def test_secrets_must_come_from_the_environment_in_a_pod() -> None:
    text = TWO.replace("api_key: {env: VLLM_API_KEY}", "api_key: {file: /run/key}")
    with pytest.raises(ConfigError, match=re.escape("write api_key: {env: VLLM_API_KEY}")):
        render.lws_manifest(loads(text), text, image="x")


def test_systemd_gives_one_node_its_rank() -> None:
    text = render.systemd_text(loads(TWO, name="llama70b"), 1)
    assert "Environment=VLLM_LAUNCH_NODE_RANK=1\n" in text and "vllm-launch@llama70b" in text
    with pytest.raises(ConfigError, match=re.escape("outside 0..1")):
        render.systemd_text(loads(TWO), 2)
    with pytest.raises(ConfigError, match="needs a nodes: section"):
        render.systemd_text(loads("model: m\nvllm: {host: 127.0.0.1}\n"), 0)


def test_pods_wait_as_long_as_systemd_does_before_sigkill() -> None:
    """Kubernetes' grace period is the profile's stop_grace plus the margin systemd's TimeoutStopSec has: 30 s of
    grace is not enough for vLLM to stop in order and give the GPU memory back."""
    text = TWO + "launcher: {stop_grace: 45s}\n"
    lws = render.lws_manifest(loads(text, name="llama70b"), text, image="x")[1]
    spec = lws["spec"]["leaderWorkerTemplate"]
    assert [45 + STOP_MARGIN_S] * 2 == [spec[t]["spec"]["terminationGracePeriodSeconds"]
                                        for t in ("leaderTemplate", "workerTemplate")]
    assert f"TimeoutStopSec={45 + STOP_MARGIN_S}s" in drop_in(loads(text, name="llama70b"))
    jsonschema.validate(lws, SCHEMA)
    assert [] == unknown_fields(lws, SCHEMA)


def test_every_object_carries_the_recommended_labels(documents: list[dict[str, Any]]) -> None:
    """app.kubernetes.io/*: name, instance, component (leader/worker), version (of the image's tag),
    managed-by; the Service still selects the leader pod."""
    common = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": "vllm-llama70b",
              "app.kubernetes.io/version": "1", "app.kubernetes.io/managed-by": "vllm-launch"}
    for document in documents:
        assert common == document["metadata"]["labels"]
    spec = documents[1]["spec"]["leaderWorkerTemplate"]
    for template, component in (("leaderTemplate", "leader"), ("workerTemplate", "worker")):
        labels = spec[template]["metadata"]["labels"]
        assert {**common, "app.kubernetes.io/component": component, "role": component} == labels
    assert "leader" == documents[2]["spec"]["selector"]["role"]


@pytest.mark.parametrize(("image", "version"), [
    ("vllm-launch:v0.32.0", "0.32.0"), ("registry:5000/team/vllm-launch:0.11.1-cu128", "0.11.1"),
    ("vllm-launch:nightly", "nightly"), ("registry:5000/vllm-launch", None), ("vllm-launch@sha256:" + "a" * 64, None),
    ("vllm-launch:" + "x" * 70, None),
])
def test_the_version_label_is_the_images_tag(image: str, version: str | None) -> None:
    """A port in the registry is no tag; a digest has none; a value Kubernetes would refuse is left out."""
    assert version == render.image_version(image)
    assert version == render.standard_labels("i", image).get("app.kubernetes.io/version")


def test_render_lws_defaults_to_the_image_of_the_shipped_vllm_release(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "llama70b.yaml"
    profile.write_text(TWO)
    assert 0 == main(["render", "lws", str(profile)])
    lws = list(yaml.safe_load_all(capsys.readouterr().out))[1]
    container = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert f"vllm-launch:v{SHIPPED_VERSION}" == container["image"]
    assert SHIPPED_VERSION == lws["metadata"]["labels"]["app.kubernetes.io/version"]


def test_no_image_floats_on_latest() -> None:
    """The Dockerfile builds on the vLLM release whose flags the launcher ships, and nothing names :latest."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"ARG VLLM_VERSION=v{SHIPPED_VERSION}\nFROM vllm/vllm-openai:${{VLLM_VERSION}}\n" in dockerfile
    assert {f"v{SHIPPED_VERSION}"} == set(re.findall(r"v\d+\.\d+\.\d+", dockerfile))
    sources = [ROOT / "Dockerfile", *(ROOT / "launcher").rglob("*.py"), *(ROOT / "scripts").iterdir()]
    assert [] == [str(p) for p in sources if p.is_file() and ":latest" in p.read_text(errors="replace")]


def test_a_loopback_profile_without_an_api_key_is_refused_not_rendered_into_pods_that_exit_78() -> None:
    """The pods serve on 0.0.0.0 (the Service reaches them there): without api_key each would exit 78."""
    text = TWO.replace("host: 0.0.0.0", "host: 127.0.0.1").replace("api_key: {env: VLLM_API_KEY}\n", "")
    with pytest.raises(ConfigError) as caught:
        render.lws_manifest(loads(text), text, image="x")
    assert "api_key: {env: VLLM_API_KEY}" in str(caught.value) and "\n" not in str(caught.value)
    allowed = text + "allow_unauthenticated: true\n"
    assert 3 == len(render.lws_manifest(loads(allowed), allowed, image="x"))


def test_what_the_pods_read_is_validated_as_they_would_validate_it() -> None:
    """The ConfigMap is the profile text as given: a plain secret in env: there never reaches a ConfigMap."""
    text = TWO + "env: {AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI}\n"
    with pytest.raises(ConfigError) as caught:
        render.lws_manifest(loads(TWO), text, image="x")
    assert "env.AWS_SECRET_ACCESS_KEY" in str(caught.value) and "wJalrXUtnFEMI" not in str(caught.value)
