"""`vllm-launch bench`: an agent's multi-turn workload against a served model, measured as `vllm bench serve` does.

May import every folder below it (`config`, `vllm`, `plan`, `run`) and the ground floor; never `launcher.cli`.
"""
