"""`vllm-launch tune`: the configuration that serves the most users within a latency target.

May import every folder below it (`config`, `gpu`, `vllm`, `plan`, `run`, `deploy`, `bench`) and the ground floor;
never `launcher.cli`.
"""
