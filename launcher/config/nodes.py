"""`nodes:` — one profile served across nodes by vLLM's own multi-node engine (or an existing Ray cluster).

The launcher builds no cluster of its own: each node runs `vllm-launch up` for its rank, and vLLM's
`--nnodes/--node-rank/--master-addr/--master-port` (with `--headless` on the workers) joins them. This
module says which rank this node is and where its head is (config/nodes_section.py reads the section).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.errors import ProfileError

BACKENDS = ("mp", "ray")
NODES_KEYS = ("count", "master_addr", "master_port", "backend")
MASTER_PORT = 29501  # nodes.master_port unless the profile says
# Where Kubernetes' LeaderWorkerSet puts a pod's index in its group and the leader's address.
LWS_RANK = "LWS_WORKER_INDEX"
LWS_LEADER = "LWS_LEADER_ADDRESS"
RANK_VARIABLE = "VLLM_LAUNCH_NODE_RANK"
# A host name or an IPv4/IPv6 address: one argv word after --master-addr. Never a leading '-': vLLM's argparse
# would read it as a flag of its own (--master-addr --headless).
ADDRESS = re.compile(r"[A-Za-z0-9_.:\[\]][A-Za-z0-9_.:\[\]-]*")


def is_address(text: str) -> bool:
    return ADDRESS.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class NodesSettings:
    count: int
    master_addr: str | None  # as written; None: from master_addr_env or the LeaderWorkerSet's leader address
    master_addr_env: str | None
    master_port: int
    backend: str


@dataclass(frozen=True, slots=True)
class Placement:
    """This node's part: its rank of `count`, and the head's address (rank 0 serves the API)."""

    rank: int
    count: int
    master_addr: str
    master_port: int
    backend: str

    @property
    def head(self) -> bool:
        return self.rank == 0


def placement(nodes: NodesSettings, source: str, rank: int | None, environ: Mapping[str, str],
              *, need_rank: bool = True) -> Placement:
    """This node's rank (--node-rank, else VLLM_LAUNCH_NODE_RANK, else LWS_WORKER_INDEX) and its head's
    address (nodes.master_addr, its {env:}, else LWS_LEADER_ADDRESS); 78 with the fix when either is
    missing or out of range. `need_rank=False` (plan) assumes the head."""
    if rank is None:
        for variable in (RANK_VARIABLE, LWS_RANK):
            text = environ.get(variable, "").strip()
            if text:
                if not text.isdigit():
                    raise ProfileError(source, "nodes", f"{variable}={text!r} is not a node rank",
                                       f"set {variable} to 0..{nodes.count - 1}")
                rank = int(text)
                break
    if rank is None:
        if need_rank:
            raise ProfileError(source, "nodes", f"nodes.count is {nodes.count} and this node's rank is not given",
                               f"pass --node-rank N (0 is the head; or set {RANK_VARIABLE}, or run under a "
                               "LeaderWorkerSet)")
        rank = 0
    if not 0 <= rank < nodes.count:
        raise ProfileError(source, "nodes", f"node rank {rank} is outside 0..{nodes.count - 1}",
                           f"give a rank from 0 (the head) to {nodes.count - 1}")
    return Placement(rank, nodes.count, _head_address(nodes, source, environ), nodes.master_port, nodes.backend)


def _head_address(nodes: NodesSettings, source: str, environ: Mapping[str, str]) -> str:
    """nodes.master_addr as written (checked when the profile was read), else the variable its {env:} names,
    else LWS_LEADER_ADDRESS; a variable's value is checked here, since it becomes one argv word."""
    name = nodes.master_addr_env if nodes.master_addr is None else None
    address = nodes.master_addr or (environ.get(name, "") if name else "")
    if not address and environ.get(LWS_LEADER, ""):
        name, address = LWS_LEADER, environ[LWS_LEADER]
    if not address:
        where = f"${nodes.master_addr_env} is empty" if nodes.master_addr_env else "nodes.master_addr is missing"
        raise ProfileError(source, "nodes.master_addr", f"{where}: the nodes cannot find their head",
                           "write master_addr: <the head node's address> (under a LeaderWorkerSet it comes "
                           f"from {LWS_LEADER})")
    address = address.strip()
    if name and not is_address(address):
        shown = repr(address[:80]) + ("…" if len(address) > 80 else "")
        raise ProfileError(source, "nodes.master_addr", f"${name}={shown} is not an address (it would reach "
                           "vllm serve as --master-addr, maybe as an option of its own)",
                           f"set {name} to the head node's host name or IP address")
    return address
