"""`vllm-launch tune`: the configuration that serves the most users within a latency target."""
