"""Launch and keep it served: the daemon, one start-up attempt, serving and restarts, the child process, state.

May import every folder below it (`config`, `gpu`, `vllm`, `plan`) and the ground floor; never `launcher.cli`.
"""
