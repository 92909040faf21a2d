"""The configuration failures among vLLM's log signatures: a profile, flag or model that can never work as set.

They are never retried (exit 78). `launcher.vllm.signatures` puts them in its table, in this order, between the
KV-cache and the engine-death signatures; the first that matches a line wins.
"""

from __future__ import annotations

from typing import Any

from launcher.vllm.signature_kit import CONFIG, Signature, _int, _numbers, _sig, _tool_parser, _world

# Modules whose pip package has another name (the rest install under their own, lower-cased).
_PIP_NAMES = {"cv2": "opencv-python-headless", "PIL": "pillow", "sklearn": "scikit-learn", "yaml": "pyyaml",
              "google": "protobuf", "attr": "attrs", "bs4": "beautifulsoup4", "flash_attn": "flash-attn",
              "sentencepiece": "sentencepiece", "SentencePiece": "sentencepiece"}


def _package(groups: dict[str, str | None]) -> dict[str, Any]:
    """The pip package a missing module or library comes from: `torchvision.transforms` → torchvision."""
    names = [name.strip() for name in (groups.get("packages") or groups.get("module") or "").split(",") if name.strip()]
    packages = [_PIP_NAMES.get(name.split(".")[0], name.split(".")[0].lower()) for name in names]
    return {"package": " ".join(dict.fromkeys(packages))} if packages else {}


CONFIG_SIGNATURES: tuple[Signature, ...] = (
    # ---- configuration: never retried
    _sig("failure", "invalid tool call parser",
         r"invalid tool call parser: (?P<name>\S{1,256}) \(chose from \{ ?(?P<valid>[^}]*?) ?\}\)",
         CONFIG, "tool_parser", "specific", _tool_parser),
    _sig("failure", "error: argument --tool-call-parser",
         r"error: argument --tool-call-parser: invalid choice: '(?P<name>[^']+)' \(choose from (?P<valid>[^)]*)\)?",
         CONFIG, "tool_parser", "specific",
         lambda g: _tool_parser({"name": g.get("name"), "valid": (g.get("valid") or "").replace("'", "")})),
    _sig("failure", "which has not been registered",
         r"--enable-auto-tool-choice requires tool_parser:'(?P<name>[^']+)' which has not been registered",
         CONFIG, "tool_parser", "specific", _tool_parser),
    _sig("failure", "requires --tool-call-parser", r"--enable-auto-tool-choice requires --tool-call-parser",
         CONFIG, "tool_parser", "specific"),
    _sig("failure", "easoning parser", r"invalid reasoning parser: (?P<name>\S{1,256})|Reasoning parser '(?P<quoted>[^']+)' "
         r"not found", CONFIG, "reasoning_parser", "specific"),
    _sig("failure", "reasoning_parser_name=", r"reasoning_parser_name=\S{1,256} has not been registered", CONFIG,
         "reasoning_parser", "specific"),
    _sig("failure", "unrecognized arguments", r"error: unrecognized arguments: (?P<arguments>.+)", CONFIG,
         "unknown_flag", "specific", _numbers(arguments="str")),
    _sig("failure", "error: argument", r"error: argument (?P<argument>\S{1,256}?):? (?P<problem>.+)", CONFIG, "bad_argument",
         "specific", _numbers(argument="str")),
    _sig("failure", "is greater than the derived max_model_len",
         r"User-specified max_model_len \((?P<max_model_len>\d+)\) is greater than the derived max_model_len "
         r"\((?P<derived_key>\w+)=(?P<derived_max_model_len>[\d.]+)",
         CONFIG, "max_model_len_above_model", "specific",
         lambda g: {"max_model_len": _int(g.get("max_model_len")),
                    "derived_max_model_len": int(float(g.get("derived_max_model_len") or 0))}),
    _sig("failure", "RepositoryNotFoundError", r"RepositoryNotFoundError", CONFIG, "model_not_found", "specific"),
    # "If you are trying to access a private or gated repo" is Hugging Face's hint under a repository
    # that does not exist: not a gated model.
    _sig("failure", "gated", r"(?<!private or )[Gg]ated ?[Rr]epo|Access to model \S{1,256} is restricted",
         CONFIG, "gated_repo", "specific"),
    _sig("failure", "Client Error", r"40[13] Client Error", CONFIG, "gated_repo", "specific"),
    _sig("failure", "404 Client Error", r"404 Client Error: Not Found for url: \S{1,256}/(?:resolve|api/models)/", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "Invalid repository ID", r"Invalid repository ID or local directory specified", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "Repo id must be", r"Repo id must be in the form", CONFIG, "model_not_found", "specific"),
    _sig("failure", "model identifier", r"is not a valid model identifier", CONFIG, "model_not_found", "specific"),
    _sig("failure", "couldn't connect to", r"We couldn't connect to '[^']*' to load the files", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "model weights with", r"Cannot find any (?:safetensors )?model weights with", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "referenced in index but missing", r"Weight files referenced in index but missing", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "no config file found", r"Could not detect config format for no config file found", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "Failed to load the model config", r"Failed to load the model config\. If the model is a custom "
         r"model not yet available", CONFIG, "unsupported_model", "specific"),
    _sig("failure", "does not support `--runner", r"This model does not support `--runner \w+`", CONFIG,
         "unsupported_model", "specific"),
    _sig("failure", "Unsupported quantization config", r"Unsupported quantization config(?::| found for)", CONFIG,
         "unsupported_model", "specific"),
    _sig("failure", "Unsupported ModelOpt", r"Unsupported ModelOpt (?:FP8|NVFP4) quant_algo", CONFIG, "unsupported_model",
         "specific"),
    _sig("failure", "only supports", r"MoEMethod only supports (?:4bit|int4 and int8) now", CONFIG, "unsupported_model",
         "specific"),
    _sig("failure", "Unsupported num_bits = ", r"Unsupported num_bits = \d+\. Supported", CONFIG, "unsupported_model",
         "specific"),
    _sig("failure", "ModelOpt currently only supports", r"ModelOpt currently only supports", CONFIG, "unsupported_model",
         "specific"),
    _sig("failure", "weights were not initialized from checkpoint",
         r"Following weights were not initialized from checkpoint", CONFIG, "unsupported_model", "specific"),
    _sig("failure", "Sparse Attention is not supported on CPU", r"Sparse Attention is not supported on CPU", CONFIG,
         "unsupported_model", "specific"),
    _sig("failure", "page size is not divisible by the maximum page size",
         r"page size is not divisible by the maximum page size and cannot be padded", CONFIG, "unsupported_model",
         "specific"),
    _sig("failure", "does not have `num_attention_heads`", r"The text_config extracted from the model config does not "
         r"have `num_attention_heads`", CONFIG, "unsupported_model", "specific"),
    _sig("failure", "not supported", r"Model architectures? \[[^\]]*\] (?:are|is) not supported", CONFIG,
         "unsupported_model", "specific"),
    _sig("failure", "does not recognize this architecture", r"does not recognize this architecture", CONFIG,
         "unsupported_model", "specific"),
    _sig("failure", "ddress already in use", r"(?i)\[errno 98\].*address already in use", CONFIG, "port_in_use",
         "specific"),
    _sig("failure", "EADDRINUSE", r"name: EADDRINUSE", CONFIG, "port_in_use", "specific"),
    _sig("failure", "larger than the number of available GPUs",
         r"World size \((?P<world_size>\d+)\) is larger than the number of available GPUs \((?P<gpus>\d+)\)",
         CONFIG, "not_enough_gpus", "specific", _world),
    _sig("failure", "must be less than or equal to the number of visible devices",
         r"local_world_size \((?P<world_size>\d+)\) must be less than or equal to the number of visible devices "
         r"\((?P<gpus>\d+)\)", CONFIG, "not_enough_gpus", "specific", _world),
    _sig("failure", "exceeds the total number of available GPUs",
         r"number of required GPUs exceeds the total number of available GPUs", CONFIG, "not_enough_gpus", "specific"),
    _sig("failure", "available. current_node_resource", r"Current node has no GPU available\. current_node_resource",
         CONFIG, "not_enough_gpus", "specific"),
    _sig("failure", "devices visible)", r"--device-ids index \d+ is out of range for \w+=\S* \((?P<gpus>\d+) devices "
         r"visible\)", CONFIG, "not_enough_gpus", "specific", _world),
    _sig("failure", "Not enough resources to allocate", r"Not enough resources to allocate (?P<world_size>\d+) placement "
         r"groups", CONFIG, "not_enough_gpus", "specific"),
    _sig("failure", "Cannot provide a placement group",
         r"Cannot provide a placement group requiring (?P<world_size>[\d.]+) GPUs", CONFIG, "not_enough_gpus",
         "specific", _world),
    _sig("failure", "must be divisible by tensor parallel size",
         r"must be divisible by tensor parallel size", CONFIG, "bad_argument", "specific"),
    _sig("failure", "not supported for quantization method", r"is not supported for quantization method", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "does not match the quantization method",
         r"Quantization method specified in the model config \(\S{1,256}\) does not match the quantization method",
         CONFIG, "bad_argument", "specific"),
    _sig("failure", "Bfloat16 is only supported on GPUs", r"Bfloat16 is only supported on GPUs with compute capability",
         CONFIG, "bad_argument", "specific"),
    _sig("failure", "is not supported for the current GPU", r"The quantization method \S{1,256}(?: \+ \w+)? is not supported "
         r"for the current GPU\. Minimum capability", CONFIG, "bad_argument", "specific"),
    _sig("failure", "is smaller than max_model_len", r"max_num_batched_tokens \(\d+\) is smaller than max_model_len "
         r"\(\d+\)", CONFIG, "bad_argument", "specific"),
    _sig("failure", "GPU memory utilization must be", r"GPU memory utilization must be less than 1\.0", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "Unknown quantization method", r"Unknown quantization method: \S{1,256} Must be one of", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "Pipeline parallelism is not supported for this model",
         r"Pipeline parallelism is not supported for this model", CONFIG, "bad_argument", "specific"),
    _sig("failure", "attention backend", r"No valid attention backend found for", CONFIG, "bad_argument", "specific"),
    _sig("failure", "is not valid for this configuration", r"Selected backend \S{1,256} is not valid for this configuration",
         CONFIG, "bad_argument", "specific"),
    _sig("failure", "does not support float16", r"The model type \S{1,256} does not support float16", CONFIG, "bad_argument",
         "specific"),
    _sig("failure", "is incompatible with dtype=", r"kv_cache_dtype=\S{1,256} is incompatible with dtype=", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "no longer supports online quantization",
         r"The `fp8` quantization method no longer supports online quantization", CONFIG, "bad_argument", "specific"),
    _sig("failure", "quantization is currently not supported in", r"(?<!\S)\S{1,64} quantization is currently not supported in",
         CONFIG, "bad_argument", "specific"),
    _sig("failure", "Invalid kv_cache_dtype", r"Invalid kv_cache_dtype: \S{1,256} Valid values are", CONFIG, "bad_argument",
         "specific"),
    _sig("failure", "max_model_len must be a positive integer", r"max_model_len must be a positive integer", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "must be divisible by tp_size", r"heads \(\d+\) must be divisible by tp_size", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "We recommend to remove", r"is not supported\. We recommend to remove \S{1,256} from your config", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "are mutually exclusive", r"^\s*(?:\w+: )?'?\S{1,256} and \S{1,256} are mutually exclusive",
         CONFIG, "bad_argument",
         "specific"),
    _sig("failure", "--allow-deprecated-quantization", r"is deprecated and will be removed in future versions of vLLM\. "
         r"To bypass, set `--allow-deprecated-quantization`", CONFIG, "bad_argument", "specific"),
    _sig("failure", "must be greater than or equal to max_num_seqs",
         r"max_num_batched_tokens \(\d+\) must be greater than or equal to max_num_seqs \(\d+\)", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "cannot be greater than", r"(?:max_num_active_seqs \(\d+\) cannot be greater than max_num_seqs"
         r"|long_prefill_token_threshold \(\d+\) cannot be greater than the max_model_len)", CONFIG, "bad_argument",
         "specific"),
    _sig("failure", "Invalid quantization method", r"Invalid quantization method: \S{1,256}", CONFIG, "bad_argument",
         "specific"),
    _sig("failure", "Placement group bundle", r"Placement group bundle cannot have more than \d+ \w+", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "oad_format", r"Unknown load_format: \S{1,256}|Load format `[^`]+` is not supported", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "Unknown vLLM environment variable detected", r"Unknown vLLM environment variable detected: \S{1,256}",
         CONFIG, "bad_argument", "specific"),
    _sig("failure", "block size", r"share no supported KV cache block size|^\s*(?:\w+: )?No common block size for \d+"
         r"|KV cache block size \d+ is not supported by attention backend", CONFIG, "bad_argument", "specific"),
    _sig("failure", "for logical device", r"Physical device \S{1,256} for logical device \S{1,256} is not visible in", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "Error: --", r"^\s*(?:\w+: )?'?Error: --[\w-]+ (?:requires|must be|has unknown)", CONFIG,
         "bad_argument", "specific"),
    # ---- a Python package the model (its processor, tokenizer or remote code) imports is not installed. A
    # traceback ends in it; vLLM's own modules (a broken build: vllm._C) are not a dependency of the model.
    _sig("failure", "No module named", r"^\s*(?:[\w.]+\.)?ModuleNotFoundError: No module named "
         r"'(?P<module>(?!vllm\b)[\w.]{1,128})'", CONFIG, "missing_dependency", "specific", _package),
    _sig("failure", "packages that were not found in your environment", r"requires the following packages that were "
         r"not found in your environment: (?P<packages>[\w., -]{1,256}?)\. Run `pip install", CONFIG,
         "missing_dependency", "specific", _package),
    _sig("failure", "library but it was not found in your environment", r"^\s*(?:ImportError: )?\w{1,128} requires the "
         r"(?P<module>[\w.-]{1,128}) library but it was not found in your environment", CONFIG, "missing_dependency",
         "specific", _package),
    _sig("failure", "No model specified", r"No model (?:specified|_tag specified)", CONFIG, "bad_argument", "specific"),
)
