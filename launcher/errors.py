"""Errors that carry their exit code and the fix.

`cli.main()` is the only place that turns them into exit codes (sysexits):
78 (EX_CONFIG) for what can never work as configured, 75 (EX_TEMPFAIL) for
what may work later, 2 for command-line misuse. systemd units list 78 in
RestartPreventExitStatus= so that a bad profile is not restarted in a loop.
"""

from __future__ import annotations

EX_OK = 0
EX_USAGE = 2
EX_TEMPFAIL = 75
EX_CONFIG = 78


class LauncherError(Exception):
    """Base of every error the launcher reports to its operator."""

    exit_code = 1


class UsageError(LauncherError):
    """The command line itself is wrong."""

    exit_code = EX_USAGE


class ConfigError(LauncherError):
    """A profile, flag, model or GPU that can never work as configured: never retried."""

    exit_code = EX_CONFIG


class ProfileError(ConfigError):
    """One bad input in a profile: names the file, the line, the key and the fix."""

    def __init__(self, source: str, key: str, problem: str, fix: str, line: int | None = None) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        self.fix = fix
        self.line = line
        where = f"{source}:{line}" if line else source
        key_part = f" {key}:" if key else ""
        super().__init__(f"{where}:{key_part} {problem}; {fix}")


class PreflightError(ConfigError):
    """The GPU (or host) cannot run this profile: the message lists each blocking problem."""


class LockHeld(ConfigError):
    """Another `vllm-launch up` already serves this profile or port."""


class VllmNotFound(ConfigError):
    """No `vllm` executable to launch."""


class TransientFailure(LauncherError):
    """Start-up failed in a way that may succeed later (systemd may restart us)."""

    exit_code = EX_TEMPFAIL


class LadderExhausted(TransientFailure):
    """Every rung the profile allows was tried and failed."""
