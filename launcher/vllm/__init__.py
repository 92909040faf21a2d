"""What we know about vLLM itself, without running it: the argv plan, the installed version, log signatures, diagnosis.

May import `launcher.config` and the ground floor.
"""
