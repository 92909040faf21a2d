"""Before the first attempt of `up`: stop our own leftovers, run the GPU preflight.

Unlike `plan/preflight.py` (pure checks), this stage acts: it stops processes an earlier run of
this profile left behind, and re-reads the GPUs once they are gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import structlog

from launcher.config import flags, secrets
from launcher.config.profile import FlagValue, Profile
from launcher.errors import ConfigError, PreflightError
from launcher.gpu.inventory import GpuInventory
from launcher.gpu.match import device_cc
from launcher.plan.facts import gather, read_inventory
from launcher.plan.hostfacts import host_facts
from launcher.plan.preflight import FP8_KV_MIN_CC, evaluate
from launcher.plan.problems import PreflightResult, Severity
from launcher.run import gpurelease, processes
from launcher.run.session import GpuIdentity, Installed, RunConfig, Session
from launcher.statedir import cache_dir
from launcher.vllm import command, install
from launcher.vllm.versions import semantics

log = structlog.get_logger("vllm_launch")


def probe_vllm(config: RunConfig, run: Callable[..., Any]) -> Installed:
    """The profile's secrets, its vLLM binary, version and flag list, and its flags checked against that list;
    `run` runs the probes (each can take many seconds: vLLM imports torch)."""
    prof = config.profile
    keys = secrets.resolve(prof, config.environ)
    vllm_bin = install.find_vllm(prof.launcher.vllm_bin, config.environ)
    version = install.installed_version(vllm_bin, run=run)
    catalog = install.catalog_for(vllm_bin, version, cache_dir(config.environ), run=run)
    flags.check_profile_flags(prof, catalog)
    return Installed(str(vllm_bin), semantics(version), catalog, keys)


def check_while_serving(session: Session, config: RunConfig, installed: Installed) -> None:
    """A reload's checks before the serving vLLM is stopped: what needs no GPU memory. The first attempt's argv
    and environment can be exec'd, and preflight's pure checks pass on the GPUs as they will be after the stop
    (gpurelease.as_if_stopped: the memory our tree holds counted free). On the CPU backend the host-memory
    check is skipped: the serving vLLM holds that RAM and its RSS counts shared pages once per process, so no
    honest figure exists before the stop; the preflight after the stop still makes it. Nothing is stopped."""
    prof = config.profile
    plan = command.build_plan(prof, {}, vllm_bin=installed.vllm_bin, catalog=installed.catalog,
                              placement=config.placement)
    problem = command.exec_problem(plan, installed.secrets)
    if problem:
        raise ConfigError(problem)
    child = session.ready.child if session.ready is not None else None
    ours = frozenset(child.known) | {child.pid} if child is not None else frozenset()
    cpu = prof.launcher.device == "cpu"
    inventory = GpuInventory(source="host") if cpu else gpurelease.as_if_stopped(
        read_inventory(config.inventory_path, config.environ), session.gpu_baseline, ours)
    facts = gather(prof, plan, None if cpu else inventory, version=installed.semantics, environ=config.environ,
                   records=session.store.directory)
    host = host_facts(prof, environ=config.environ)
    host = dataclasses.replace(host, leftovers=tuple(p for p in host.leftovers if p.pid not in ours),
                               memory_available_bytes=None if cpu else host.memory_available_bytes)
    _refuse_blocking(evaluate(prof, inventory, host=host, capacity=facts.capacity, version=installed.semantics))


def _refuse_blocking(result: PreflightResult) -> None:
    if result.blocking:
        errors = [f"{p.code}: {p.message} → {p.fix}" for p in result.problems if p.severity is Severity.ERROR]
        raise PreflightError("preflight: " + " | ".join(errors))


def stop_recorded_leftovers(previous: Any) -> None:
    """Processes an earlier run of this profile recorded and left alive hold memory: stop them."""
    procs = processes.recorded_children(previous)
    if procs:
        names = [f"{p.pid}" for p in procs]
        log.warning("preflight.leftovers", pids=names, action="stopping them: they were ours")
        stuck = processes.kill_processes(procs)
        if stuck:
            raise PreflightError(f"processes of an earlier run cannot be stopped: {', '.join(stuck)} (a process "
                                 "stuck in the GPU driver needs a reboot)")


def preflight(session: Session) -> tuple[dict[str, FlagValue | None], GpuIdentity]:
    """The overrides the first attempt starts with, and the GPU it runs on; raises when a launch is doomed."""
    prof = session.profile
    cpu = prof.launcher.device == "cpu"
    inventory = GpuInventory(source="host") if cpu else read_inventory(session.config.inventory_path,
                                                                        session.environ)
    devices = inventory.visible_devices
    gpu_id = GpuIdentity("cpu", 1, None) if cpu else GpuIdentity(devices[0].name if devices else "none",
                                                                  len(devices), inventory.driver_version)
    plan = command.build_plan(prof, {}, vllm_bin=session.vllm.vllm_bin, catalog=session.vllm.catalog,
                              placement=session.config.placement)
    facts = gather(prof, plan, None if cpu else inventory, version=session.vllm.semantics, environ=session.environ,
                   records=session.store.directory)
    if facts.no_estimate:
        log.info("preflight.no_estimate", reason=facts.no_estimate)
    cap = facts.capacity
    host = host_facts(prof, environ=session.environ)
    if host.leftovers:
        # Orphaned VLLM:: processes of ours hold memory: stop them, then read the GPU again.
        log.warning("preflight.leftovers", processes=[f"{p.pid} {p.name} ({p.why})" for p in host.leftovers],
                    action="stopping them")
        stuck = processes.kill_processes(processes.live_processes(p.pid for p in host.leftovers))
        if stuck:
            raise PreflightError(f"leftover processes cannot be stopped: {', '.join(stuck)} (a process stuck in "
                                 "the GPU driver needs a reboot)")
        if not cpu:
            inventory = read_inventory(session.config.inventory_path, session.environ)
        host = host_facts(prof, environ=session.environ)
    if not cpu and inventory.visible_devices:
        session.gpu_baseline = gpurelease.baseline(inventory.visible_devices)
    # For status's advice: whether FP8 KV is an option on this GPU (unknown on the CPU backend or an unknown GPU).
    ccs = [device_cc(d) for d in inventory.visible_devices] if not cpu else []
    session.store.update(fp8_kv=all(c >= FP8_KV_MIN_CC for c in ccs if c is not None)
                         if ccs and None not in ccs else None)
    result = evaluate(prof, inventory, host=host, capacity=cap, version=session.vllm.semantics)
    for problem in result.problems:
        (log.error if problem.severity is Severity.ERROR else log.warning)(
            "preflight.problem", code=problem.code, message=problem.message, fix=problem.fix)
    for change in result.changes:
        log.info("preflight.change", change=change)
    _refuse_blocking(result)
    if cap is not None:
        log.info("preflight.ok", kv_tokens_estimate=cap.kv_tokens, sessions_estimate=cap.sessions,
                 verdict=cap.verdict, basis=cap.basis, error_range=cap.error_range)
    return dict(result.overrides), gpu_id


def ray_cluster(status_text: str) -> tuple[int, float]:
    """(active nodes, total GPUs) from `ray status`: the Active: section's node lines, the `x/y GPU` usage."""
    nodes, gpus, section = 0, 0.0, ""
    for line in status_text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and not stripped[:1].isdigit():
            section = stripped[:-1]
            continue
        if section == "Active" and stripped[:1].isdigit():
            nodes += int(stripped.split()[0])
        elif section == "Usage" and stripped.endswith(" GPU") and "/" in stripped:
            with contextlib.suppress(ValueError):
                gpus = float(stripped.split("/")[1].split()[0])
    return nodes, gpus


def check_ray(profile: Profile, run: Any) -> None:
    """backend: ray — the launcher does not manage the Ray cluster; it checks that it is all there."""
    nodes = profile.nodes
    assert nodes is not None  # noqa: S101 - only called for a nodes: profile
    try:
        done = run(["ray", "status"], timeout=60)
    except OSError:
        raise ConfigError("nodes.backend is ray but `ray` is not installed here; install ray on every node and "
                          "start the cluster (`ray start --head` on this node)") from None
    if done.returncode != 0:
        raise PreflightError(f"`ray status` failed ({(done.stderr or done.stdout).strip()[-200:]}); start the "
                             "cluster first (`ray start --head` here, `ray start --address=...` on the others)")
    found, gpus = ray_cluster(done.stdout)
    wanted = profile.tensor_parallel_size * profile.pipeline_parallel_size
    if found < nodes.count or gpus < wanted:
        raise PreflightError(f"the Ray cluster has {found} node(s) and {gpus:g} GPU(s); the profile needs "
                             f"{nodes.count} nodes and {wanted} GPUs (nodes.count, tensor × pipeline parallel): "
                             "join the missing nodes with `ray start --address=<head>:6379`")
    log.info("preflight.ray", nodes=found, gpus=gpus)
