"""Before launch: model facts, the capacity estimate, host facts, preflight checks and the `plan`/`preflight` reports.

May import `launcher.config`, `launcher.gpu`, `launcher.vllm` and the ground floor.
"""
