"""The `nodes:` section of a profile: how many nodes serve it, where their head is, and the backend
(config/nodes.py places this node in the group)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launcher.config.keys import KeyReader
from launcher.config.nodes import BACKENDS, MASTER_PORT, NODES_KEYS, NodesSettings, is_address


def read_nodes(r: KeyReader, raw: Any) -> NodesSettings | None:
    """The validated section, or None without one."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise r.fail("nodes", "expected a mapping", "write nodes: {count: 2, master_addr: 10.0.0.1}")
    unknown = sorted(set(raw) - set(NODES_KEYS))
    if unknown:
        raise r.fail(f"nodes.{unknown[0]}", "unknown key", f"the keys are {', '.join(NODES_KEYS)}")
    count = raw.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        raise r.fail("nodes.count", f"expected 2 or more nodes, got {count!r}",
                     "write count: 2 (or more); one node needs no nodes: section")
    written = raw.get("master_addr")
    address: Any = written
    address_env: str | None = None
    if isinstance(written, Mapping):
        if set(written) != {"env"} or not isinstance(written["env"], str):
            raise r.fail("nodes.master_addr", "expected an address or {env: NAME}",
                         "write master_addr: 10.0.0.1 or master_addr: {env: VLLM_MASTER_ADDR}")
        address, address_env = None, str(written["env"])
    elif address is not None and isinstance(address, str) and address.startswith("-"):
        raise r.fail("nodes.master_addr", f"{address!r} would reach vllm serve as an option, not an address",
                     "write master_addr: 10.0.0.1 (the head node's host name or IP address)")
    elif address is not None and (not isinstance(address, str) or not is_address(address)):
        raise r.fail("nodes.master_addr", f"not an address: {address!r}", "write master_addr: 10.0.0.1 (the head node)")
    port = raw.get("master_port", MASTER_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise r.fail("nodes.master_port", f"expected a port number, got {port!r}", "write master_port: 29501")
    backend = raw.get("backend", BACKENDS[0])
    if backend not in BACKENDS:
        raise r.fail("nodes.backend", f"expected mp or ray, got {backend!r}",
                     "write backend: mp (vLLM's own multi-node) or backend: ray (an existing Ray cluster)")
    return NodesSettings(count, address, address_env, port, str(backend))
