"""`vllm-launch render`: what one multi-node profile needs on a cluster, printed, never written.

`render lws`: a Kubernetes LeaderWorkerSet (one group of `nodes.count` pods; the leader is rank 0 and serves
the API) with the profile in a ConfigMap and a Service for the leader. Every pod runs `vllm-launch up`; its
rank and the leader's address come from the LeaderWorkerSet's own environment (LWS_WORKER_INDEX,
LWS_LEADER_ADDRESS), the API key and the HF token from a Secret (secretKeyRef, never inline).
`render systemd --node-rank N`: the drop-in that gives one bare-metal node its rank.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from launcher.config import document
from launcher.config.flags import SHIPPED_VERSION
from launcher.config.load import loads
from launcher.config.nodes import LWS_LEADER, RANK_VARIABLE
from launcher.config.profile import Profile
from launcher.deploy.systemd_plan import instance_name, stop_timeout_s
from launcher.errors import ConfigError, ProfileError

PROFILE_DIR = "/etc/vllm-launch"
SECRET_KEYS = {"api_key": "VLLM_API_KEY", "hf_token": "HF_TOKEN"}
# The image the Dockerfile builds, tagged with the vLLM release it bundles: the one the shipped flags are for.
DEFAULT_IMAGE = f"vllm-launch:v{SHIPPED_VERSION}"
_VERSION_IN_TAG = re.compile(r"\d+\.\d+(?:\.\d+)?")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-_.A-Za-z0-9]{0,61}[A-Za-z0-9])?$")


def image_version(image: str) -> str | None:
    """The version an image's tag names (`vllm-launch:v0.32.0` → 0.32.0, `…:nightly` → nightly), as a label
    value; None without a tag (a digest, or no tag at all) or where the tag is no valid label value."""
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    match = _VERSION_IN_TAG.search(tag)
    value = match.group(0) if match else tag
    return value if _LABEL_VALUE.fullmatch(value) else None


def standard_labels(instance: str, image: str) -> dict[str, str]:
    """Kubernetes' recommended labels (app.kubernetes.io/*): what runs, which instance, at which version, and
    that vllm-launch manages it (kubectl get -l app.kubernetes.io/managed-by=vllm-launch)."""
    labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": instance}
    version = image_version(image)
    if version:
        labels["app.kubernetes.io/version"] = version
    labels["app.kubernetes.io/managed-by"] = "vllm-launch"
    return labels


def _need_nodes(profile: Profile) -> Any:
    if profile.nodes is None:
        raise ConfigError(f"{profile.source}: render needs a nodes: section (count, master_addr, master_port); "
                          "a one-node profile runs with `vllm-launch up` or scripts/install-systemd")
    return profile.nodes


def _secret_env(profile: Profile, secret_name: str) -> list[dict[str, Any]]:
    """Each secret the profile uses, as the variable its {env: NAME} names, from the Secret."""
    env = []
    for key, default in SECRET_KEYS.items():
        ref = getattr(profile, key)
        if ref is None:
            continue
        if ref.kind != "env":
            raise ConfigError(f"{profile.source}: {key}: a pod gets its secrets as environment variables from a "
                              f"Secret; write {key}: {{env: {default}}}")
        env.append({"name": ref.ref, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}})
    return env


def resource_name(profile: Profile) -> str:
    """The name of the LeaderWorkerSet and its Service (a DNS label), and the stem of its ConfigMap and Secret."""
    return f"vllm-{instance_name(profile)}".lower().replace("_", "-").replace(".", "-")


def secret_name(profile: Profile) -> str:
    """The Secret the pods read the API key and the HF token from (the operator creates it)."""
    return f"{resource_name(profile)}-secrets"


def lws_manifest(profile: Profile, profile_text: str, *, image: str, gpus_per_node: int | None = None,
                 namespace: str = "default") -> list[dict[str, Any]]:
    nodes = _need_nodes(profile)
    name = resource_name(profile)
    gpus = gpus_per_node or profile.gpus_needed
    secret = secret_name(profile)
    port = profile.port
    profile_path = f"{PROFILE_DIR}/{profile.name}.yaml"
    labels = standard_labels(name, image)  # copied per object: yaml writes one dict met twice as an alias
    # Kubernetes waits as long before its SIGKILL as systemd does: vLLM stopped in order, GPU memory back.
    grace_s = stop_timeout_s(profile)

    def container(leader: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": "vllm-launch",
            "image": image,
            "command": ["vllm-launch", "up", profile_path, "--log-format", "json"],
            # LWS_WORKER_INDEX (the rank) and LWS_LEADER_ADDRESS (the head) are set by the LeaderWorkerSet.
            "env": [*_secret_env(profile, secret)],
            "resources": {"limits": {"nvidia.com/gpu": gpus}},
            "volumeMounts": [{"name": "profile", "mountPath": PROFILE_DIR, "readOnly": True},
                             {"name": "dshm", "mountPath": "/dev/shm"}],  # noqa: S108 - the pod's own shm
        }
        if leader:
            spec["ports"] = [{"name": "http", "containerPort": port}]
            spec["readinessProbe"] = {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 10,
                                      "failureThreshold": 3}
        return spec

    def template(leader: bool) -> dict[str, Any]:
        role = "leader" if leader else "worker"
        return {"metadata": {"labels": {**labels, "app.kubernetes.io/component": role, "role": role}},
                "spec": {"terminationGracePeriodSeconds": grace_s, "containers": [container(leader)], "volumes": [
                    {"name": "profile", "configMap": {"name": f"{name}-profile"}},
                    # NCCL and vLLM's workers share memory through /dev/shm: the container default is 64 MiB.
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}}]}}

    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-profile", "namespace": namespace,
                                                                    "labels": dict(labels)},
                  "data": {f"{profile.name}.yaml": _checked_pod_profile(profile, profile_text, nodes)}}
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
           "spec": {"replicas": 1, "leaderWorkerTemplate": {
               "size": nodes.count, "restartPolicy": "RecreateGroupOnPodRestart",
               "leaderTemplate": template(True), "workerTemplate": template(False)}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
               "spec": {"selector": {"leaderworkerset.sigs.k8s.io/name": name, "role": "leader"},
                        "ports": [{"name": "http", "port": port, "targetPort": port}]}}
    return [config_map, lws, service]


def _checked_pod_profile(profile: Profile, text: str, nodes: Any) -> str:
    """The pods' profile, validated as each pod's `vllm-launch up` will validate it: pods that would all exit
    78 are refused here, with the fix, instead of printed."""
    if profile.api_key is None and not profile.allow_unauthenticated:
        raise ConfigError(f"{profile.source}: api_key: the pods serve on 0.0.0.0 (the Service reaches them there) "
                          "and this profile has no API key, so every pod would exit 78; add api_key: "
                          "{env: VLLM_API_KEY} (the pods read it from the Secret) or allow_unauthenticated: true")
    rendered = _pod_profile(text, profile.source, nodes)
    try:
        loads(rendered, source=f"{profile.source} (as the pods read it)", name=profile.name)
    except ProfileError as exc:
        raise ConfigError(f"render lws: every pod would exit 78 on this profile: {exc}") from None
    return rendered


def _pod_profile(text: str, source: str, nodes: Any) -> str:
    """The profile as the pods read it: the head's address from the LeaderWorkerSet, the API on all interfaces
    of the pod (the Service reaches it)."""
    data = document.parse_mapping(text, source)
    data.setdefault("nodes", {})["master_addr"] = {"env": LWS_LEADER}
    data.setdefault("vllm", {})["host"] = "0.0.0.0"  # noqa: S104 - inside the pod; the API key guards it
    return yaml.safe_dump(data, sort_keys=False)


def lws_text(documents: list[dict[str, Any]], secret_hint: str) -> str:
    head = (f"# kubectl create secret generic {secret_hint} --from-literal=api_key=... [--from-literal=hf_token=...]\n"
            "# kubectl apply -f this file (needs the LeaderWorkerSet controller: https://lws.sigs.k8s.io)\n")
    return head + "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in documents)


def systemd_text(profile: Profile, rank: int) -> str:
    nodes = _need_nodes(profile)
    if not 0 <= rank < nodes.count:
        raise ConfigError(f"--node-rank {rank} is outside 0..{nodes.count - 1}")
    name = instance_name(profile)
    role = "the head: it serves the API" if rank == 0 else "a headless worker"
    return (f"# Node {rank} of {nodes.count} ({role}) for vllm-launch@{name}. On this node: install with\n"
            f"#   sudo scripts/install-systemd {profile.source}\n"
            f"# then put this in /etc/systemd/system/vllm-launch@{name}.service.d/20-node.conf and run\n"
            f"#   sudo systemctl daemon-reload && sudo systemctl restart vllm-launch@{name}\n"
            "[Service]\n"
            f"Environment={RANK_VARIABLE}={rank}\n")
