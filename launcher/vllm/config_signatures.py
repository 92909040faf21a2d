"""The configuration failures among vLLM's log signatures: a profile, flag or model that can never work as set.

They are never retried (exit 78). `launcher.vllm.signatures` puts them in its table, in this order, between the
KV-cache and the engine-death signatures; the first that matches a line wins. Each names its reason, whose row
in `launcher.vllm.config_reasons` holds the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from launcher.vllm.config_reasons import ConfigReason
from launcher.vllm.signature_kit import CONFIG, EventKind, Signature, _int, _numbers, _sig, _tool_parser, _world

# Modules whose pip package has another name (the rest install under their own, lower-cased).
_PIP_NAMES = {"cv2": "opencv-python-headless", "PIL": "pillow", "sklearn": "scikit-learn", "yaml": "pyyaml",
              "google": "protobuf", "attr": "attrs", "bs4": "beautifulsoup4", "flash_attn": "flash-attn",
              "sentencepiece": "sentencepiece", "SentencePiece": "sentencepiece"}


def _package(groups: dict[str, str | None]) -> dict[str, Any]:
    """The pip package a missing module or library comes from: `torchvision.transforms` → torchvision."""
    names = [name.strip() for name in (groups.get("packages") or groups.get("module") or "").split(",") if name.strip()]
    packages = [_PIP_NAMES.get(name.split(".")[0], name.split(".")[0].lower()) for name in names]
    return {"package": " ".join(dict.fromkeys(packages))} if packages else {}


def _config(needle: str, pattern: str, reason: ConfigReason,
            convert: Callable[[dict[str, str | None]], dict[str, Any]] | None = None, any_level: bool = False) -> Signature:
    """A configuration failure's signature: it decides at once (a specific fatal line) and is never retried."""
    return _sig(EventKind.FAILURE, needle, pattern, CONFIG, reason, "specific", convert, any_level)


CONFIG_SIGNATURES: tuple[Signature, ...] = (
    # ---- configuration: never retried
    _config("invalid tool call parser",
            r"invalid tool call parser: (?P<name>\S{1,256}) \(chose from \{ ?(?P<valid>[^}]*?) ?\}\)",
            ConfigReason.TOOL_PARSER, _tool_parser),
    _config("error: argument --tool-call-parser",
            r"error: argument --tool-call-parser: invalid choice: '(?P<name>[^']+)' \(choose from (?P<valid>[^)]*)\)?",
            ConfigReason.TOOL_PARSER,
            lambda g: _tool_parser({"name": g.get("name"), "valid": (g.get("valid") or "").replace("'", "")})),
    _config("which has not been registered",
            r"--enable-auto-tool-choice requires tool_parser:'(?P<name>[^']+)' which has not been registered",
            ConfigReason.TOOL_PARSER, _tool_parser),
    _config("requires --tool-call-parser", r"--enable-auto-tool-choice requires --tool-call-parser",
            ConfigReason.TOOL_PARSER),
    _config("easoning parser", r"invalid reasoning parser: (?P<name>\S{1,256})|Reasoning parser '(?P<quoted>[^']+)' "
            r"not found", ConfigReason.REASONING_PARSER),
    _config("reasoning_parser_name=", r"reasoning_parser_name=\S{1,256} has not been registered", ConfigReason.REASONING_PARSER),
    _config("unrecognized arguments", r"error: unrecognized arguments: (?P<arguments>.+)",
            ConfigReason.UNKNOWN_FLAG, _numbers(arguments="str")),
    _config("error: argument", r"error: argument (?P<argument>\S{1,256}?):? (?P<problem>.+)",
            ConfigReason.BAD_ARGUMENT, _numbers(argument="str")),
    _config("is greater than the derived max_model_len",
            r"User-specified max_model_len \((?P<max_model_len>\d+)\) is greater than the derived max_model_len "
            r"\((?P<derived_key>\w+)=(?P<derived_max_model_len>[\d.]+)",
            ConfigReason.MAX_MODEL_LEN_ABOVE_MODEL,
            lambda g: {"max_model_len": _int(g.get("max_model_len")),
                       "derived_max_model_len": int(float(g.get("derived_max_model_len") or 0))}),
    _config("RepositoryNotFoundError", r"RepositoryNotFoundError", ConfigReason.MODEL_NOT_FOUND),
    # "If you are trying to access a private or gated repo" is Hugging Face's hint under a repository
    # that does not exist: not a gated model.
    _config("gated", r"(?<!private or )[Gg]ated ?[Rr]epo|Access to model \S{1,256} is restricted",
            ConfigReason.GATED_REPO),
    _config("Client Error", r"40[13] Client Error", ConfigReason.GATED_REPO),
    _config("404 Client Error", r"404 Client Error: Not Found for url: \S{1,256}/(?:resolve|api/models)/",
            ConfigReason.MODEL_NOT_FOUND),
    _config("Invalid repository ID", r"Invalid repository ID or local directory specified", ConfigReason.MODEL_NOT_FOUND),
    _config("Repo id must be", r"Repo id must be in the form", ConfigReason.MODEL_NOT_FOUND),
    _config("model identifier", r"is not a valid model identifier", ConfigReason.MODEL_NOT_FOUND),
    _config("couldn't connect to", r"We couldn't connect to '[^']*' to load (?:the files|this file)",
            ConfigReason.MODEL_NOT_FOUND),
    # transformers on a local folder that holds no model, and the Hub offline (HF_HUB_OFFLINE=1) with the model
    # not in its cache: the model is not where vLLM looks for it.
    _config("a file named config.json", r"does not appear to have a file named config\.json", ConfigReason.MODEL_NOT_FOUND),
    _config("outgoing traffic has been disabled", r"Cannot find (?:an appropriate cached snapshot folder|the requested "
            r"files in the disk cache)[^.]{0,120} and outgoing traffic has been disabled", ConfigReason.MODEL_NOT_FOUND),
    _config("model weights with", r"Cannot find any (?:safetensors )?model weights with", ConfigReason.MODEL_NOT_FOUND),
    _config("referenced in index but missing", r"Weight files referenced in index but missing", ConfigReason.MODEL_NOT_FOUND),
    _config("no config file found", r"Could not detect config format for no config file found", ConfigReason.MODEL_NOT_FOUND),
    _config("Failed to load the model config", r"Failed to load the model config\. If the model is a custom "
            r"model not yet available", ConfigReason.UNSUPPORTED_MODEL),
    _config("does not support `--runner", r"This model does not support `--runner \w+`", ConfigReason.UNSUPPORTED_MODEL),
    _config("Unsupported quantization config", r"Unsupported quantization config(?::| found for)",
            ConfigReason.UNSUPPORTED_MODEL),
    _config("Unsupported ModelOpt", r"Unsupported ModelOpt (?:FP8|NVFP4) quant_algo", ConfigReason.UNSUPPORTED_MODEL),
    _config("only supports", r"MoEMethod only supports (?:4bit|int4 and int8) now", ConfigReason.UNSUPPORTED_MODEL),
    _config("Unsupported num_bits = ", r"Unsupported num_bits = \d+\. Supported", ConfigReason.UNSUPPORTED_MODEL),
    _config("ModelOpt currently only supports", r"ModelOpt currently only supports", ConfigReason.UNSUPPORTED_MODEL),
    _config("weights were not initialized from checkpoint",
            r"Following weights were not initialized from checkpoint", ConfigReason.UNSUPPORTED_MODEL),
    _config("Sparse Attention is not supported on CPU", r"Sparse Attention is not supported on CPU",
            ConfigReason.UNSUPPORTED_MODEL),
    _config("page size is not divisible by the maximum page size",
            r"page size is not divisible by the maximum page size and cannot be padded", ConfigReason.UNSUPPORTED_MODEL),
    _config("does not have `num_attention_heads`", r"The text_config extracted from the model config does not "
            r"have `num_attention_heads`", ConfigReason.UNSUPPORTED_MODEL),
    _config("not supported", r"Model architectures? \[[^\]]*\] (?:are|is) not supported", ConfigReason.UNSUPPORTED_MODEL),
    _config("does not recognize this architecture", r"does not recognize this architecture", ConfigReason.UNSUPPORTED_MODEL),
    # The server's socket: EADDRINUSE is errno 98 on Linux, 48 on macOS, 10048 on Windows.
    _config("ddress already in use", r"(?i)\[errno \d{2,5}\].*address already in use", ConfigReason.PORT_IN_USE),
    _config("EADDRINUSE", r"name: EADDRINUSE", ConfigReason.PORT_IN_USE),
    _config("larger than the number of available GPUs",
            r"World size \((?P<world_size>\d+)\) is larger than the number of available GPUs \((?P<gpus>\d+)\)",
            ConfigReason.NOT_ENOUGH_GPUS, _world),
    _config("must be less than or equal to the number of visible devices",
            r"local_world_size \((?P<world_size>\d+)\) must be less than or equal to the number of visible devices "
            r"\((?P<gpus>\d+)\)", ConfigReason.NOT_ENOUGH_GPUS, _world),
    _config("exceeds the total number of available GPUs",
            r"number of required GPUs exceeds the total number of available GPUs", ConfigReason.NOT_ENOUGH_GPUS,
            any_level=True),  # 0.8's Ray executor warns, then waits for GPUs that never come: an accusation
    _config("available. current_node_resource", r"Current node has no GPU available\. current_node_resource",
            ConfigReason.NOT_ENOUGH_GPUS),
    _config("devices visible)", r"--device-ids index \d+ is out of range for \w+=\S* \((?P<gpus>\d+) devices "
            r"visible\)", ConfigReason.NOT_ENOUGH_GPUS, _world),
    # A rank asked its runtime for a device index past the GPUs visible to it (tensor parallel above this node's
    # GPUs under Ray or a data-parallel backend, where vLLM's own count check does not run; CUDA_VISIBLE_DEVICES
    # naming fewer): the final exception of the rank's traceback, or V0's worker line. (A warning that a communicator
    # hit it on the way, and the start-up went on, is no failure: it is no exception line.)
    _config("invalid device ordinal", r"(?:^\s*(?:[\w.]+\.)?\w*(?:Error|Exception): |while processing method \w+: )"
            r"(?:CUDA|HIP) error: invalid device ordinal", ConfigReason.NOT_ENOUGH_GPUS),
    _config("Not enough resources to allocate", r"Not enough resources to allocate (?P<world_size>\d+) placement "
            r"groups", ConfigReason.NOT_ENOUGH_GPUS),
    _config("Cannot provide a placement group",
            r"Cannot provide a placement group requiring (?P<world_size>[\d.]+) GPUs", ConfigReason.NOT_ENOUGH_GPUS, _world),
    _config("must be divisible by tensor parallel size",
            r"(?:attention heads \((?P<attention_heads>\d+)\) )?must be divisible by tensor parallel size"
            r"(?: \((?P<tensor_parallel_size>\d+)\))?", ConfigReason.HEADS_NOT_DIVISIBLE,
            _numbers(attention_heads="int", tensor_parallel_size="int")),
    # A dtype the quantization's kernels do not take (`torch.bfloat16 is not supported for quantization method awq.
    # Supported dtypes: [torch.float16]`): the dtype's reason, with the dtypes that would do.
    _config("not supported for quantization method", r"^\s*(?:\w+: )?(?:torch\.)?(?P<dtype>b?float\d{0,2}|half) is not "
            r"supported for quantization method (?P<quantization>\w{1,64})\.?(?: Supported dtypes: \[(?P<supported>[^\]]"
            r"{1,200})\])?", ConfigReason.DTYPE_UNSUPPORTED, _numbers(dtype="str", quantization="str", supported="str")),
    _config("not supported for quantization method", r"is not supported for quantization method", ConfigReason.BAD_ARGUMENT),
    _config("does not match the quantization method",
            r"Quantization method specified in the model config \(\S{1,256}\) does not match the quantization method",
            ConfigReason.BAD_ARGUMENT),
    _config("Bfloat16 is only supported on GPUs", r"Bfloat16 is only supported on GPUs with compute capability"
            r"(?:.{0,60}?Your (?P<gpu_name>.{1,80}?) GPU has compute capability (?P<compute_capability>\d+\.\d+))?",
            ConfigReason.DTYPE_UNSUPPORTED, _numbers(gpu_name="str", compute_capability="str")),
    _config("is not supported for the current GPU", r"The quantization method \S{1,256}(?: \+ \w+)? is not supported "
            r"for the current GPU\. Minimum capability", ConfigReason.BAD_ARGUMENT),
    # Its sibling in vLLM's kernel selection (model_executor/kernels/linear): no kernel for the checkpoint's quantized
    # layers on this GPU with the linear backend as set (each kernel's reason follows on the next lines).
    _config("Failed to find a kernel that can implement", r"Failed to find a kernel that can implement the \w{1,64} linear "
            r"layer", ConfigReason.BAD_ARGUMENT),
    _config("is smaller than max_model_len", r"max_num_batched_tokens \((?P<max_num_batched_tokens>\d+)\) is "
            r"smaller than max_model_len \((?P<max_model_len>\d+)\)", ConfigReason.BATCH_BELOW_CONTEXT,
            _numbers(max_num_batched_tokens="int", max_model_len="int")),
    _config("GPU memory utilization must be", r"GPU memory utilization must be less than 1\.0", ConfigReason.BAD_ARGUMENT),
    _config("Unknown quantization method", r"Unknown quantization method: \S{1,256} Must be one of", ConfigReason.BAD_ARGUMENT),
    _config("Pipeline parallelism is not supported for this model",
            r"Pipeline parallelism is not supported for this model", ConfigReason.BAD_ARGUMENT),
    _config("attention backend", r"No valid attention backend found for", ConfigReason.BAD_ARGUMENT),
    _config("is not valid for this configuration", r"Selected backend \S{1,256} is not valid for this configuration",
            ConfigReason.BAD_ARGUMENT),
    _config("does not support float16", r"The model type \S{1,256} does not support float16", ConfigReason.BAD_ARGUMENT),
    _config("is incompatible with dtype=", r"kv_cache_dtype=\S{1,256} is incompatible with dtype=", ConfigReason.BAD_ARGUMENT),
    _config("no longer supports online quantization",
            r"The `fp8` quantization method no longer supports online quantization", ConfigReason.BAD_ARGUMENT),
    _config("quantization is currently not supported in", r"(?<!\S)\S{1,64} quantization is currently not supported in",
            ConfigReason.BAD_ARGUMENT),
    _config("Invalid kv_cache_dtype", r"Invalid kv_cache_dtype: \S{1,256} Valid values are", ConfigReason.BAD_ARGUMENT),
    _config("max_model_len must be a positive integer", r"max_model_len must be a positive integer", ConfigReason.BAD_ARGUMENT),
    _config("must be divisible by tp_size", r"heads \(\d+\) must be divisible by tp_size", ConfigReason.BAD_ARGUMENT),
    _config("We recommend to remove", r"is not supported\. We recommend to remove \S{1,256} from your config",
            ConfigReason.BAD_ARGUMENT),
    _config("are mutually exclusive", r"^\s*(?:\w+: )?'?\S{1,256} and \S{1,256} are mutually exclusive",
            ConfigReason.BAD_ARGUMENT),
    _config("--allow-deprecated-quantization", r"is deprecated and will be removed in future versions of vLLM\. "
            r"To bypass, set `--allow-deprecated-quantization`", ConfigReason.BAD_ARGUMENT),
    _config("must be greater than or equal to max_num_seqs",
            r"max_num_batched_tokens \(\d+\) must be greater than or equal to max_num_seqs \(\d+\)", ConfigReason.BAD_ARGUMENT),
    _config("cannot be greater than", r"(?:max_num_active_seqs \(\d+\) cannot be greater than max_num_seqs"
            r"|long_prefill_token_threshold \(\d+\) cannot be greater than the max_model_len)", ConfigReason.BAD_ARGUMENT),
    _config("Invalid quantization method", r"Invalid quantization method: \S{1,256}", ConfigReason.BAD_ARGUMENT),
    _config("Placement group bundle", r"Placement group bundle cannot have more than \d+ \w+", ConfigReason.BAD_ARGUMENT),
    _config("oad_format", r"Unknown load_format: \S{1,256}|Load format `[^`]+` is not supported", ConfigReason.BAD_ARGUMENT),
    _config("Unknown vLLM environment variable detected", r"^\s*(?:[\w.]+: )?Unknown vLLM environment variable "
            r"detected: \S{1,256}",
            ConfigReason.BAD_ARGUMENT),
    _config("block size", r"share no supported KV cache block size|^\s*(?:\w+: )?No common block size for \d+"
            r"|KV cache block size \d+ is not supported by attention backend", ConfigReason.BAD_ARGUMENT),
    _config("for logical device", r"Physical device \S{1,256} for logical device \S{1,256} is not visible in",
            ConfigReason.BAD_ARGUMENT),
    _config("Error: --", r"^\s*(?:\w+: )?'?Error: --[\w-]+ (?:requires|must be|has unknown)", ConfigReason.BAD_ARGUMENT),
    # ---- a Python package the model (its processor, tokenizer or remote code) imports is not installed. A
    # traceback ends in it; vLLM's own modules (a broken build: vllm._C) are not a dependency of the model, but vLLM
    # itself missing from the Python that runs it is (`python -m vllm…` says so in one line: "Error while finding
    # module specification for 'vllm.entrypoints.openai.api_server' (ModuleNotFoundError: No module named 'vllm')").
    _config("No module named", r"(?:^\s*(?:[\w.]+\.)?|Error while finding module specification for '[\w.]{1,256}' \()"
            r"ModuleNotFoundError: No module named '(?P<module>(?!vllm\.)[\w.]{1,128})'", ConfigReason.MISSING_DEPENDENCY,
            _package),
    _config("packages that were not found in your environment", r"requires the following packages that were "
            r"not found in your environment: (?P<packages>[\w., -]{1,256}?)\. Run `pip install",
            ConfigReason.MISSING_DEPENDENCY, _package),
    _config("library but it was not found in your environment", r"^\s*(?:ImportError: )?\w{1,128} requires the "
            r"(?P<module>[\w.-]{1,128}) library but it was not found in your environment",
            ConfigReason.MISSING_DEPENDENCY, _package),
    # An exception that tells the operator which package to install (`Please install bitsandbytes>=0.45.0 via
    # `pip install bitsandbytes>=0.45.0``, `Please install the `deep_gemm` package`, `… op requires DeepGEMM to be
    # installed`): the package is named where a command (pip install X), a quote (`X`), what follows the name (X>=1.0,
    # X via …) or "requires X to be installed" marks it as one.
    _config("install", r"^\s*(?:[\w.]+(?:Error|Exception): ).{0,400}?(?:pip install (?:-{1,2}[\w-]+ )*['\"`]?"
            r"(?P<pip>(?!vllm\b)[A-Za-z][\w.-]{0,63})|[Pp]lease install (?:the )?`(?P<quoted>(?!vllm\b)[A-Za-z][\w.-]{0,63})`"
            r"|[Pp]lease install (?P<named>(?!vllm\b|the\b|it\b|a\b|an\b)[A-Za-z][\w-]{0,63})(?:[<>=~]| (?:via|with|using|"
            r"package|first|to use|for)\b)|\brequires (?P<required>(?!vllm\b)[A-Za-z][\w-]{0,63}) to be installed)",
            ConfigReason.MISSING_DEPENDENCY,
            lambda g: _package({"module": g.get("pip") or g.get("quoted") or g.get("named") or g.get("required")})),
    # A package's own check that its companion package is the same release (`flashinfer-cubin version (0.6.8)
    # does not match flashinfer version (0.5.3)`): installing matching versions fixes it, the first one named.
    _config("does not match", r"^\s*(?:[\w.]+(?:Error|Exception): )(?P<module>(?!vllm\b)[A-Za-z][\w.-]{0,63}) version "
            r"\(?[\w.+-]{1,64}\)? does not match (?:the )?[A-Za-z][\w.-]{0,63} version", ConfigReason.MISSING_DEPENDENCY,
            _package),
    # A kernel compiled at start-up (FlashInfer's sampler, DeepGEMM) needs the CUDA toolkit's compiler.
    _config("Could not find nvcc", r"Could not find nvcc", ConfigReason.MISSING_DEPENDENCY, lambda g: {"package": "nvcc"}),
    # Triton builds its driver module with the host's C compiler on the first kernel launch (triton/runtime/build.py).
    _config("Failed to find C compiler", r"Failed to find C compiler", ConfigReason.MISSING_DEPENDENCY,
            lambda g: {"package": "cc"}),
    _config("No model specified", r"No model (?:specified|_tag specified)", ConfigReason.BAD_ARGUMENT),
    # The Run:ai model streamer (--load-format runai_streamer) refuses a memory_limit (--model-loader-extra-config)
    # below one tensor's size.
    _config("RunaiStreamerMemoryLimitException", r"RunaiStreamerMemoryLimitException: Memory limit supplied",
            ConfigReason.BAD_ARGUMENT),
)
