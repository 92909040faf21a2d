"""`vllm-launch plan` and `vllm-launch preflight`: put profile, model, GPU, vLLM version and capacity together.

This is the edge where files, the environment and probes are read; the pieces
it calls (command.build_plan, capacity.estimate, preflight.evaluate) stay pure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from launcher.config import document, flags
from launcher.config.load import load, loads
from launcher.config.nodes import Placement, placement
from launcher.config.profile import FlagValue, Profile
from launcher.errors import ConfigError, ProfileError, UsageError, VllmNotFound
from launcher.gpu.catalog import GpuSpec, parse_gpu_spec
from launcher.gpu.detect import detect
from launcher.gpu.inventory import GpuInventory, GpuProbe
from launcher.gpu.match import inventory_from_spec
from launcher.plan.agentchecks import agent_problems
from launcher.plan.agentfacts import AgentFacts, agent_facts
from launcher.plan.capacity import CapacityPlan
from launcher.plan.facts import NO_GPU, Facts, calibrated, gather, no_gpu, read_inventory
from launcher.plan.hostfacts import HostFacts, host_facts
from launcher.plan.modelinfo import ModelFiles
from launcher.plan.preflight import evaluate, evaluate_inventory
from launcher.plan.problems import PreflightResult, Problem
from launcher.statedir import cache_dir, state_root
from launcher.vllm import command, install
from launcher.vllm.command import Plan
from launcher.vllm.install import resolve_version
from launcher.vllm.versions import VersionSemantics, semantics


@dataclass(frozen=True, slots=True)
class PlanReport:
    """Everything `plan` prints: the command, the capacity, the ladder and what preflight changed."""

    profile: Profile
    plan: Plan
    capacity: CapacityPlan | None
    gpu: GpuSpec | None
    version: VersionSemantics
    version_source: str
    catalog: flags.FlagCatalog
    model_config_source: str | None
    changes: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()  # when a GPU was read
    warnings: tuple[str, ...] = field(default_factory=tuple)
    placement: Placement | None = None  # this rank of a multi-node profile

    def to_dict(self) -> dict[str, Any]:
        cap = self.capacity
        ladder = self.profile.launcher.ladder
        data: dict[str, Any] = {
            "profile": self.profile.source,
            "model": self.profile.model,
            "served_model_name": self.plan.served_model_name,
            "vllm_version": self.version.version,
            "vllm_version_source": self.version_source,
            "flag_list": f"{self.catalog.source} ({self.catalog.version})",
            "gpu": self.gpu.describe() if self.gpu else None,
            "gpu_count": self.gpu.count if self.gpu else None,
            "utilization": self.version.utilization(self.plan.utilization),
            "kv_cache_dtype": self.plan.kv_cache_dtype,
            "max_model_len": cap.max_model_len if cap else self.plan.max_model_len,
            "argv": list(self.plan.argv),
            "env_keys": sorted([*self.plan.env, *self.plan.secret_env_keys]),
            "secret_env_keys": list(self.plan.secret_env_keys),
            "health_url": self.plan.health_url,
            "overrides": dict(self.plan.overrides),
            "changes": list(self.changes),
            "ladder": {
                "gpu_memory_utilization": list(ladder.utilization_rungs),
                "drop_fp8_kv_if_unsupported": ladder.drop_fp8_kv_if_unsupported,
                "min_model_len": ladder.min_model_len,
                "max_attempts": self.profile.launcher.max_attempts,
            },
            "problems": [p.to_dict() for p in self.problems],
            "warnings": list(self.warnings) + (list(cap.warnings) if cap else []),
        }
        if cap is not None:
            data.update({
                "kv_bytes_per_token": cap.kv_bytes_per_token,
                "kv_bytes_exact": cap.kv_bytes_exact,
                "weights_bytes": cap.weights_bytes,
                "weights_per_gpu_bytes": cap.weights_per_gpu_bytes,
                "budget_bytes": cap.budget_bytes,
                "reserve_bytes": {"activation": cap.activation_bytes, "non_torch": cap.non_torch_bytes,
                                  "cuda_graphs": cap.cudagraph_bytes},
                "kv_budget_bytes": cap.kv_budget_bytes,
                "kv_tokens": cap.kv_tokens,
                "kv_tokens_range": [cap.kv_tokens_low, cap.kv_tokens_high],
                "capacity_basis": cap.basis,
                "error_range": cap.error_range,
                "sessions": cap.sessions,
                "full_sessions": cap.full_sessions,
                "verdict": cap.verdict,
                "assumptions": list(cap.assumptions),
            })
        else:
            data["verdict"] = None
        if self.placement is not None:
            where = self.placement
            data["nodes"] = {"count": where.count, "rank": where.rank, "role": "head" if where.head else "worker",
                             "master_addr": where.master_addr, "master_port": where.master_port,
                             "backend": where.backend, "gpus_per_node": self.profile.gpus_needed,
                             "model_path_note": "the model must be at the same path on every node; only this "
                                                "node's copy is checked"}
        return data


def profile_for(profile_path: str | None, model_config: str | None, sets: Sequence[str]) -> Profile:
    """The profile file, or a minimal one built from --model-config when no profile is given."""
    if profile_path:
        return load(profile_path, sets)
    if not model_config:
        raise UsageError("plan needs a PROFILE, or --model-config FILE to plan a bare model")
    try:  # the same guarded reader as a profile: bounded, strict UTF-8, no alias bombs
        config, _ = document.parse(document.read_text(model_config), model_config)
    except ProfileError as exc:
        raise UsageError(f"--model-config {model_config}: cannot read it ({exc.problem})") from None
    name = str(config.get("_name_or_path") or Path(model_config).stem) if isinstance(config, dict) else "model"
    text = yaml.safe_dump({"model": name, "vllm": {"host": "127.0.0.1"}})
    return loads(text, source=model_config, name=Path(model_config).stem, sets=sets)


@dataclass(frozen=True, slots=True)
class PlanRequest:
    profile: str | None
    sets: tuple[str, ...] = ()
    gpu: str | None = None
    gpu_inventory: str | None = None
    model_config: str | None = None
    weights_gib: float | None = None
    vllm_version: str | None = None
    from_log: str | None = None
    node_rank: int | None = None  # with a nodes: section: the rank whose argv to show (default: the head)


def run_plan(request: PlanRequest, environ: Mapping[str, str] | None = None) -> PlanReport:
    """Build the whole plan report for `vllm-launch plan`."""
    environ = os.environ if environ is None else environ
    prof = profile_for(request.profile, request.model_config, request.sets)
    try:
        vllm_path: Path | None = install.find_vllm(prof.launcher.vllm_bin, environ)
    except VllmNotFound:
        vllm_path = None
    version, version_source, installed = resolve_version(request.vllm_version, vllm_path)
    same = installed is not None and (request.vllm_version is None
                                      or semantics(installed).key == version.key)
    catalog = install.catalog_for(vllm_path if same else None, installed, cache_dir(environ))
    flags.check_profile_flags(prof, catalog)
    warnings: list[str] = []
    if catalog.source == "shipped":
        warnings.append(f"flags checked against the list shipped for vLLM {catalog.version} (no installed vLLM found)")

    inventory: GpuInventory | None
    simulated = False
    if request.gpu and not request.gpu_inventory:
        inventory, simulated = inventory_from_spec(parse_gpu_spec(request.gpu)), True
    elif request.gpu_inventory or prof.launcher.device != "cpu":
        inventory = read_inventory(request.gpu_inventory, environ)
        if no_gpu(inventory):
            raise UsageError(f"{NO_GPU}: pass --gpu NAME (e.g. --gpu l40s, \"a100-80gb x2\") or --gpu-inventory "
                             "FILE to plan for one")
    else:
        inventory = None

    vllm_bin = str(vllm_path) if vllm_path else (prof.launcher.vllm_bin or "vllm")
    overrides: dict[str, FlagValue | None] = {}
    where = None if prof.nodes is None else placement(prof.nodes, prof.source, request.node_rank, environ,
                                                      need_rank=False)
    if where is None and request.node_rank is not None:
        raise UsageError("--node-rank needs a profile with a nodes: section")
    plan = command.build_plan(prof, overrides, vllm_bin=vllm_bin, catalog=catalog, placement=where)

    def gathered(plan: Plan) -> Facts:
        return gather(prof, plan, inventory, version=version, environ=environ, model_config=request.model_config,
                      weights_gib=request.weights_gib)

    facts = gathered(plan)
    if facts.no_estimate:
        warnings.append(f"no capacity estimate: {facts.no_estimate}")
    problems: tuple[Problem, ...] = ()
    changes: tuple[str, ...] = ()
    if inventory is not None:
        host = HostFacts.none() if simulated else host_facts(prof, environ=environ)
        result = evaluate(prof, inventory, host=host, capacity=facts.estimate, version=version)
        problems, changes = result.problems, result.changes
        if result.overrides:
            overrides.update(result.overrides)
            plan = command.build_plan(prof, overrides, vllm_bin=vllm_bin, catalog=catalog, placement=where)
            facts = gathered(plan)
    # What a start-up measured replaces the estimate for the plan the checks led to.
    facts = calibrated(facts, prof, plan, version, weights_gib=request.weights_gib,
                       records=state_root(environ) / prof.name, from_log=request.from_log)
    cap, files, gpu = facts.capacity, facts.files, facts.gpu
    problems += agent_problems(prof, _agent_facts(prof, files, catalog, None, environ))
    required = prof.launcher.require.min_sessions
    if cap is not None and required is not None and cap.sessions < required:
        warnings.append(f"the estimate gives {cap.sessions:.2f} sessions of {cap.max_model_len:,}, below "
                        f"launcher.require.min_sessions {required:g}: `up` would fail the capacity gate "
                        "(kv_insufficient) unless the live numbers are better")
    return PlanReport(profile=prof, plan=plan, capacity=cap, gpu=gpu, version=version,
                      version_source=version_source, catalog=catalog,
                      model_config_source=files.config_source if files else None, changes=changes,
                      problems=problems, warnings=tuple(warnings), placement=where)


def _agent_facts(profile: Profile, files: ModelFiles | None, catalog: flags.FlagCatalog | None, version: str | None,
                 environ: Mapping[str, str]) -> AgentFacts:
    """The agent checks' facts: the parser names are those of the flag list the profile is checked against
    (`catalog`), else of vLLM `version`."""
    spec = catalog.lookup("tool-call-parser") if catalog else None
    return agent_facts(profile, config=files.config if files else None, environ=environ,
                       vllm_version=catalog.version if catalog else str(version),
                       tool_choices=spec.choices if spec else None)


def run_preflight(profile_path: str | None, *, sets: Sequence[str] = (), inventory_path: str | None = None,
                environ: Mapping[str, str] | None = None,
                probe_factory: Callable[[Mapping[str, str] | None], GpuProbe | None] = detect) -> PreflightResult:
    """`vllm-launch preflight [PROFILE] [--gpu-inventory FILE]`: read the GPUs and the host, then evaluate."""
    environ = os.environ if environ is None else environ
    prof = load(profile_path, sets) if profile_path else None
    if prof is not None and prof.launcher.device == "cpu" and not inventory_path:
        inventory = GpuInventory(source="none", notes=("launcher.device: cpu: the GPUs are not probed",))
    else:
        inventory = read_inventory(inventory_path, environ, probe_factory)
    host = host_facts(prof, environ=environ)
    if prof is None:
        return evaluate_inventory(inventory, host)
    try:
        vllm_path = install.find_vllm(prof.launcher.vllm_bin, environ)
    except ConfigError:
        vllm_path = None
    version, _, installed = resolve_version(None, vllm_path)
    # The CPU backend is sized on host memory, whatever inventory file was given.
    facts = gather(prof, command.build_plan(prof), None if prof.launcher.device == "cpu" else inventory,
                   version=version, environ=environ)
    result = evaluate(prof, inventory, host=host, capacity=facts.capacity, version=version)
    # The flag list plan would check against, without asking vLLM (10 s): its cached help, else the shipped list
    # when no vLLM is found; an installed vLLM whose help is not cached has its parser names from the table.
    catalog = flags.shipped_catalog() if installed is None else install.cached_catalog(installed, cache_dir(environ))
    agent = agent_problems(prof, _agent_facts(prof, facts.files, catalog, installed, environ))
    return replace(result, problems=result.problems + agent)
