"""vllm-launch: a supervisor that turns a YAML profile into a healthy `vllm serve`."""

__version__ = "0.1.0"
