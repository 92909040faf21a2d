"""Turn the raw document into a `Profile`: top-level keys, secrets, env and vllm flags (the launcher: section
has its own module), raising on the first bad key."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from launcher.config.flags import FlagCatalog, check_flag
from launcher.config.keys import KeyReader, closest, type_name
from launcher.config.launcher_section import read_launcher
from launcher.config.nodes import NodesSettings
from launcher.config.nodes_section import read_nodes
from launcher.config.profile import KV_CACHE_DTYPES, FlagValue, LadderBounds, Profile, is_loopback, parse_max_model_len
from launcher.config.spawnable import document_problem, word_problem
from launcher.errors import ProfileError

_TOP_KEYS = ("model", "vllm", "api_key", "hf_token", "allow_unauthenticated", "env", "launcher", "nodes")

# Environment names that hold secrets (AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, GOOGLE_CREDENTIALS, DB_PASSWORD):
# never literals in a profile, which is copied into ConfigMaps, backups and tune's output.
_SECRET_ENV = re.compile(r"SECRET|(API_?KEY|TOKEN|PASSWORD|PASSWD|CREDENTIALS?|PRIVATE_KEY)$", re.IGNORECASE)
_CLIENT_SECRETS = {"VLLM_API_KEY": "api_key: {env: VLLM_API_KEY}", "HF_TOKEN": "hf_token: {env: HF_TOKEN}"}
# Values that look like a credential whatever key they sit under (OpenAI-style, Hugging Face).
_SECRET_VALUE = re.compile(r"^(sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,})$")
# A URL that carries a password (scheme://user:password@host): a proxy, a database, a private hub.
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:[^/?#@\s]+@")
# What argv may hold after `--`: letters, digits, dots, dashes, underscores (never `=` or a space, which
# would let one key carry a second flag).
_FLAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# argparse reads a word that starts with '-' as an option unless it is a negative number.
_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")
FLAG_ALIASES = {"device-memory-utilization": "gpu-memory-utilization", "tp": "tensor-parallel-size",
                 "pp": "pipeline-parallel-size", "dp": "data-parallel-size"}


class ProfileValidator(KeyReader):
    """Turns the raw document into a Profile, raising on the first bad key."""

    def profile(self, raw: dict[str, Any], name: str) -> Profile:
        unexecutable = document_problem(raw)
        if unexecutable is not None:
            raise self.fail(*unexecutable)
        self.known_keys(raw, _TOP_KEYS, "")
        self._refuse_plaintext_secrets(raw, "")
        model = raw.get("model")
        if model is None or model == "":
            raise self.fail("model", "missing model", "add `model: <Hugging Face id or local path>` at the top level")
        if not isinstance(model, str):
            raise self.fail("model", f"expected a model id or path, got {type_name(model)}",
                            "write model: Org/Name or model: /path/to/model")
        if looks_like_option(model):
            raise self.fail("model", f"{model!r} would reach vllm serve as an option, not a model",
                            "write model: Org/Name, or ./-name for a local directory whose name starts with -")
        api_key = self.secret(raw.get("api_key"), "api_key", "VLLM_API_KEY")
        hf_token = self.secret(raw.get("hf_token"), "hf_token", "HF_TOKEN")
        allow_unauth = self.boolean(raw, "allow_unauthenticated", "allow_unauthenticated", False)
        env = self._env(raw.get("env"))
        vllm = self._vllm(raw.get("vllm"))
        launcher = read_launcher(self, self.mapping(raw.get("launcher"), "launcher"), vllm)
        nodes = read_nodes(self, raw.get("nodes"))
        if nodes is not None:
            self._check_nodes(nodes, vllm)
        vllm = _with_start_utilization(vllm, launcher.ladder)

        host = vllm.get("host")
        if api_key is None and not allow_unauth and not is_loopback(None if host is None else str(host)):
            where = f"host {host}" if host is not None else "all interfaces (vLLM's default host)"
            raise self.fail("vllm.host" if host is not None else "api_key",
                            f"the server would listen on {where} without an API key",
                            "add api_key: {env: VLLM_API_KEY}, bind host: 127.0.0.1, "
                            "or say allow_unauthenticated: true")
        content = json.dumps({"model": model, "vllm": _jsonable(vllm), "env": dict(env),
                              "api_key": api_key and api_key.describe(),
                              "hf_token": hf_token and hf_token.describe(),
                              "launcher": _jsonable(raw.get("launcher") or {}),
                              "nodes": _jsonable(raw.get("nodes") or {})},
                             sort_keys=True, default=str)
        return Profile(
            source=self.source, name=name, model=model, vllm=MappingProxyType(vllm),
            api_key=api_key, hf_token=hf_token, allow_unauthenticated=allow_unauth,
            env=MappingProxyType(env), launcher=launcher,
            digest=hashlib.sha256(content.encode()).hexdigest()[:16],
            origins=MappingProxyType(dict(self.origins)), nodes=nodes,
        )

    def _check_nodes(self, nodes: NodesSettings, vllm: Mapping[str, FlagValue]) -> None:
        """TP × PP must share out evenly over the nodes; data parallel across nodes uses other flags."""
        tp, pp = (int(vllm.get(f, 1)) for f in ("tensor-parallel-size", "pipeline-parallel-size"))  # type: ignore[arg-type]
        if int(vllm.get("data-parallel-size", 1)) > 1:  # type: ignore[arg-type]
            raise self.fail("nodes", "data parallel across nodes is not supported by this launcher yet",
                            "serve across nodes with tensor-parallel-size × pipeline-parallel-size (tensor "
                            "parallel inside a node, pipeline parallel across nodes), or one profile per node")
        if (tp * pp) % nodes.count:
            raise self.fail("nodes.count", f"tensor-parallel-size {tp} × pipeline-parallel-size {pp} = {tp * pp} GPUs "
                            f"do not share out over {nodes.count} nodes",
                            f"make tp × pp a multiple of {nodes.count} (e.g. pipeline-parallel-size: {nodes.count} "
                            "with tensor parallel inside each node)")

    def _refuse_plaintext_secrets(self, data: Any, prefix: str) -> None:
        """An API key or token written anywhere in the profile would leak into logs and backups."""
        if isinstance(data, dict):
            for key, value in data.items():
                self._refuse_plaintext_secrets(value, f"{prefix}{key}.")
        elif isinstance(data, list):
            for item in data:
                self._refuse_plaintext_secrets(item, prefix)
        elif isinstance(data, str) and _SECRET_VALUE.match(data.strip()):
            key = prefix.rstrip(".")
            raise self.fail(key, "this looks like an API key or token written in plain text",
                            "move it to an environment variable or a file and write "
                            "api_key: {env: VLLM_API_KEY} (or hf_token: {env: HF_TOKEN})")
        elif isinstance(data, str) and _URL_PASSWORD.search(data):
            raise self.fail(prefix.rstrip("."), "this URL carries a password (user:password@) in plain text",
                            "write the URL without it and give the credential to the launcher's own environment "
                            "(systemd: EnvironmentFile= or LoadCredential=; Kubernetes: a Secret): vLLM inherits it")

    def _env(self, value: Any) -> dict[str, str]:
        env: dict[str, str] = {}
        for name, item in self.mapping(value, "env").items():
            key = f"env.{name}"
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise self.fail(key, "not a valid environment variable name", "use letters, digits and _")
            if name.upper() in _CLIENT_SECRETS:
                raise self.fail(key, "a secret is written in plain text in env:",
                                f"remove it and write {_CLIENT_SECRETS[name.upper()]} (or {{file: PATH}}); "
                                "the launcher passes it to vLLM itself")
            if _SECRET_ENV.search(name):
                raise self.fail(key, "a secret-looking variable is written in plain text in env: (the profile is "
                                "copied into ConfigMaps, backups and tune --write's output)",
                                f"remove it and export {name} in the launcher's own environment (systemd: "
                                "EnvironmentFile= or LoadCredential=; Kubernetes: a Secret): vLLM inherits it")
            if isinstance(item, dict | list) or item is None:
                raise self.fail(key, f"expected a string or number, got {type_name(item)}", f"write {name}: \"value\"")
            env[name] = str(item).lower() if isinstance(item, bool) else str(item)
            problem = word_problem(env[name], f"{name}=")
            if problem:
                raise self.fail(key, f"the value {problem}", "write a shorter value")
        return env

    def _vllm(self, value: Any) -> dict[str, FlagValue]:
        flags: dict[str, FlagValue] = {}
        for raw_name, item in self.mapping(value, "vllm").items():
            key = f"vllm.{raw_name}"
            name = str(raw_name).strip().lstrip("-").replace("_", "-")
            name = FLAG_ALIASES.get(name, name)
            if not _FLAG_NAME.fullmatch(name):
                raise self.fail(key, "not a vllm serve flag name", "write the flag's long name without dashes, "
                                "e.g. max-model-len: 4096")
            # Later messages (unknown flag, bad choice) name the flag by its kebab spelling.
            if key in self.origins:
                self.origins[f"vllm.{name}"] = self.origins[key]
            if key in self.lines:
                self.lines[f"vllm.{name}"] = self.lines[key]
            if name in flags:
                raise self.fail(key, f"{name} is given twice (kebab and snake case)", "keep one spelling")
            if name == "model":
                raise self.fail(key, "the model is not a vllm: flag", "move it to the top level: model: <id or path>")
            if name == "api-key":
                raise self.fail(key, "an API key in vllm: would be passed on the command line "
                                "(world-readable in /proc)", "use api_key: {env: VLLM_API_KEY} at the top level")
            if name == "config":
                raise self.fail(key, "a second config file would bypass the profile's checks",
                                "copy its flags into vllm:")
            if item is None:
                continue  # `flag: null` means "leave vLLM's default"
            if name.startswith("no-") and item is False:
                # argparse's BooleanOptionalAction makes --X and --no-X; --no-no-X exists for no flag, and false of
                # a store_true flag spelt no-… means leaving it out. One spelling: the positive one.
                raise self.fail(key, f"{name}: false is a double negative vLLM cannot take (there is no --no-{name})",
                                f"write {name[3:]}: true, or delete the line for vLLM's default")
            flags[name] = self._flag_value(name, item, key)
        return flags

    def _flag_value(self, name: str, item: Any, key: str) -> FlagValue:
        for word in item if isinstance(item, list | tuple) else (item,):
            if isinstance(word, str) and looks_like_option(word):
                raise self.fail(key, f"the value {word!r} would reach vllm serve as an option of its own",
                                f"write {name}'s value without a leading '-'")
        if name in ("gpu-memory-utilization", "device-memory-utilization"):
            if isinstance(item, bool) or not isinstance(item, int | float) or not 0 < item <= 1:
                raise self.fail(key, f"must be a fraction in (0, 1], got {item!r}",
                                "write e.g. gpu-memory-utilization: 0.90 (a fraction of the GPU's total memory)")
            return float(item)
        if name == "kv-cache-dtype":
            if item not in KV_CACHE_DTYPES:
                close = closest(str(item), sorted(KV_CACHE_DTYPES))
                raise self.fail(key, f"unknown kv-cache-dtype {item!r}",
                                f"use auto, fp8 or another vLLM KV dtype{f' (did you mean {close}?)' if close else ''}")
            return str(item)
        if name == "max-model-len":
            try:
                parse_max_model_len(item)
            except ValueError as exc:
                raise self.fail(key, f"{exc}, got {item!r}", "write e.g. max-model-len: 65536") from None
            return item if isinstance(item, int) else str(item)
        if name in ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size", "max-num-seqs",
                    "block-size"):
            if isinstance(item, bool) or not isinstance(item, int) or item < 1:
                raise self.fail(key, f"expected a whole number ≥ 1, got {item!r}", f"write e.g. {name}: 1")
            return item
        if name == "port":
            if isinstance(item, bool) or not isinstance(item, int) or not 0 < item < 65536:
                raise self.fail(key, f"expected a TCP port (1-65535), got {item!r}", "write e.g. port: 8000")
            return item
        if name in ("host", "served-model-name", "tool-call-parser") and isinstance(item, dict | bool):
            raise self.fail(key, f"expected text, got {type_name(item)}", f"write {name}: <text>")
        if isinstance(item, list):
            if any(isinstance(x, dict | list) for x in item):
                raise self.fail(key, "lists may hold only plain values", f"write {name}: [a, b]")
            return tuple(item)
        if isinstance(item, dict):
            try:  # as command.render_flag writes it: one argv word of JSON
                text = json.dumps(item, separators=(",", ":"), sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise self.fail(key, f"holds a value JSON cannot write ({exc})",
                                "quote it to make it text (a date, for instance: '2024-01-01')") from None
            problem = word_problem(text)
            if problem:
                raise self.fail(key, f"the value as JSON {problem}", "write a shorter value")
            return MappingProxyType(dict(item))
        if isinstance(item, bool | int | float | str):
            return item
        raise self.fail(key, f"unsupported value {item!r}", "use a string, number, true/false, list or mapping")


def check_overrides(raw: Any, source: str, allowed: frozenset[str], catalog: FlagCatalog) -> dict[str, FlagValue | None]:
    """Overrides read back from the state directory (last_known_good.json), which the service user, and so
    vLLM, can write: only the flags the ladder itself changes, each value as the profile's validator and this
    vLLM's flag list would take it in a profile. Raises ProfileError naming the first bad entry."""
    if not isinstance(raw, Mapping):
        raise ProfileError(source, "overrides", f"expected a mapping of flags, got {type_name(raw)}",
                           "delete the file: the next start that reaches READY writes it again")
    reader = ProfileValidator(source, {}, {})
    checked: dict[str, FlagValue | None] = {}
    for name, value in raw.items():
        key = f"overrides.{name}"
        if name not in allowed:
            raise ProfileError(source, key, "not a flag the launcher's ladder changes",
                               f"delete the file; the ladder only changes {', '.join(sorted(allowed))}")
        if value is None:
            checked[name] = None
            continue
        if name == "max-num-batched-tokens" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ProfileError(source, key, f"expected a whole number ≥ 1, got {value!r}", "delete the file")
        item = reader._flag_value(name, value, key)
        check_flag(name, item, catalog, functools.partial(ProfileError, source, key))
        checked[name] = item
    return checked


def looks_like_option(word: str) -> bool:
    """Whether vLLM's argparse would take this argv word for an option (or its value for a new flag)."""
    return word.startswith("-") and not _NEGATIVE_NUMBER.fullmatch(word)


def _with_start_utilization(vllm: dict[str, FlagValue], ladder: LadderBounds) -> dict[str, FlagValue]:
    """With ladder rungs but no utilization flag, the first rung is the starting value."""
    if ladder.utilization_rungs and "gpu-memory-utilization" not in vllm:
        return {**vllm, "gpu-memory-utilization": ladder.utilization_rungs[0]}
    return vllm



def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
