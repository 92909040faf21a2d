"""The profile as a JSON Schema (draft 07, what yaml-language-server reads), for editors: top-level keys,
`vllm:` flags as an open mapping, `env:`, the secret forms, `nodes:`, and `launcher:` from the settings
table (config/settings.py). The validator stays the authority; the schema catches what it can before a
start (`docs/profile.schema.json`, written by scripts/profile_docs.py)."""

from __future__ import annotations

from typing import Any

from launcher.config.nodes import BACKENDS, MASTER_PORT
from launcher.config.profile import KV_CACHE_DTYPES, TOKEN_COUNT_PATTERN
from launcher.config.settings import SETTINGS, Setting
from launcher.config.validate import FLAG_ALIASES
from launcher.units import DURATION_PATTERN, SIZE_PATTERN

Schema = dict[str, Any]

SCALAR: Schema = {"type": ["string", "number", "boolean"]}
DURATION: Schema = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": DURATION_PATTERN}]}
TOKENS: Schema = {"anyOf": [{"type": "integer", "minimum": 1}, {"const": -1}, {"const": "auto"},
                            {"type": "string", "pattern": TOKEN_COUNT_PATTERN}]}
SECRET: Schema = {
    "description": "A reference to the secret, never its value: {env: NAME} or {file: PATH}.",
    "oneOf": [
        {"type": "object", "properties": {"env": {"type": "string", "minLength": 1}}, "required": ["env"],
         "additionalProperties": False},
        {"type": "object", "properties": {"file": {"type": "string", "minLength": 1}}, "required": ["file"],
         "additionalProperties": False},
    ],
}
PORT: Schema = {"type": "integer", "minimum": 1, "maximum": 65535}
WHOLE: Schema = {"type": "integer", "minimum": 1}

# The vllm: flags the validator itself types (config/validate.py); every other flag is an open value.
_FLAGS: dict[str, Schema] = {
    "gpu-memory-utilization": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "kv-cache-dtype": {"enum": sorted(KV_CACHE_DTYPES)},
    "max-model-len": TOKENS,
    "tensor-parallel-size": WHOLE, "pipeline-parallel-size": WHOLE, "data-parallel-size": WHOLE,
    "max-num-seqs": WHOLE, "block-size": WHOLE,
    "port": PORT,
    "host": {"type": "string"},
    "tool-call-parser": {"type": "string"},
    "served-model-name": {"anyOf": [{"type": "string"}, {"type": "array", "items": SCALAR, "minItems": 1}]},
}


def profile_schema() -> Schema:
    kebab = {**_FLAGS, **{alias: _FLAGS[name] for alias, name in FLAG_ALIASES.items()}}
    flags = {**kebab, **{name.replace("-", "_"): value for name, value in kebab.items() if "-" in name}}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "vllm-launch profile",
        "description": "One served model: the vllm serve flags plus the launcher's own settings (docs/profile.md).",
        "type": "object",
        "required": ["model"],
        "additionalProperties": False,
        "properties": {
            "model": {"type": "string", "minLength": 1,
                      "description": "Hugging Face id or local path of the model (required)."},
            "vllm": {
                "type": "object",
                "description": "vllm serve flags as in `vllm serve --help`, without --, kebab or snake case.",
                "properties": flags,
                "additionalProperties": {"anyOf": [SCALAR, {"type": "null"}, {"type": "array", "items": SCALAR},
                                                   {"type": "object"}]},
            },
            "api_key": {**SECRET, "description": "The API key vLLM requires, handed over as VLLM_API_KEY."},
            "hf_token": {**SECRET, "description": "A Hugging Face token for gated models, handed over as HF_TOKEN."},
            "allow_unauthenticated": {"type": "boolean", "default": False,
                                      "description": "Allow a non-loopback bind without an API key."},
            "env": {
                "type": "object",
                "description": "Added to vLLM's environment; plain values only (secrets are refused here).",
                "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                "additionalProperties": SCALAR,
            },
            "launcher": section_schema(""),
            "nodes": nodes_schema(),
        },
    }


def section_schema(section: str) -> Schema:
    """`launcher.<section>` ("" for launcher: itself) from the settings table."""
    children = [s for s in SETTINGS if s.section == section]
    schema: Schema = {"type": "object", "additionalProperties": False,
                      "properties": {s.leaf: setting_schema(s) for s in children}}
    if section == "metrics":  # exactly one of port or textfile
        schema["oneOf"] = [{"required": ["port"], "not": {"required": ["textfile"]}},
                           {"required": ["textfile"], "not": {"required": ["port"]}}]
    return schema


def setting_schema(item: Setting) -> Schema:
    low, high = item.bounds
    schema: Schema
    if item.kind == "section":
        schema = section_schema(item.name)
    elif item.kind == "choice":
        schema = {"enum": list(item.choices)}
    elif item.kind in ("path", "address"):
        schema = {"type": "string", "minLength": 1}
    elif item.kind == "size":
        schema = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": SIZE_PATTERN}]}
    elif item.kind == "count":
        schema = {"type": "integer", **_bounds(low, high)}
    elif item.kind == "duration":
        schema = {"anyOf": [{"type": "number", "minimum": low or 0, **_bounds(None, high)},
                            {"type": "string", "pattern": DURATION_PATTERN}]}
    elif item.kind == "boolean":
        schema = {"type": "boolean"}
    elif item.kind == "positive":
        schema = {"type": "number", "exclusiveMinimum": 0}
    elif item.kind == "tokens":
        schema = dict(TOKENS)
    elif item.kind == "fractions":
        schema = {"type": "array", "minItems": 1, "uniqueItems": True,
                  "items": {"type": "number", "exclusiveMinimum": low or 0, "maximum": high}}
    elif item.kind == "delays":
        schema = {"type": "array", "minItems": 2, "maxItems": 2, "items": DURATION}
    else:  # prom_path
        schema = {"type": "string", "pattern": r"\.prom$"}
    schema["description"] = item.doc
    if item.default is not None:
        schema["default"] = item.default
    return schema


def nodes_schema() -> Schema:
    return {
        "type": "object",
        "description": "Serve one profile across nodes through vLLM's own multi-node engine.",
        "required": ["count"],
        "additionalProperties": False,
        "properties": {
            "count": {"type": "integer", "minimum": 2, "description": "How many nodes serve the model."},
            "master_addr": {
                "description": "The head's (rank 0's) address, or {env: NAME}; under a LeaderWorkerSet: its leader.",
                "anyOf": [{"type": "string", "pattern": r"^[A-Za-z0-9_.:\[\]-]+$"},
                          {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"],
                           "additionalProperties": False}],
            },
            "master_port": {**PORT, "default": MASTER_PORT, "description": "The head's port for the group."},
            "backend": {"enum": list(BACKENDS), "default": BACKENDS[0],
                        "description": "mp: vLLM's own multi-node engine; ray: an existing Ray cluster."},
        },
    }


def _bounds(low: float | None, high: float | None) -> Schema:
    found: Schema = {}
    if low is not None:
        found["minimum"] = low
    if high is not None:
        found["maximum"] = high
    return found
