"""A daemon seen from outside: `status` (with `--watch`, drift and advice), and `down`, which stops it by its lock.

May import every folder below it (`config`, `gpu`, `vllm`, `plan`, `run`) and the ground floor; never `launcher.cli`.
"""
