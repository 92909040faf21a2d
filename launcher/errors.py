"""Errors that carry what they mean (an `Outcome`) and the fix.

An error says what kind of failure it is; `cli.main()` is the only place that returns it as an exit
code (sysexits): 78 (EX_CONFIG) for what can never work as configured, 75 (EX_TEMPFAIL) for what may
work later, 2 for command-line misuse. systemd units list 78 in RestartPreventExitStatus= so that a
bad profile is not restarted in a loop. The table lives here, on the ground floor, because the logs
and the container's status page name the code the launcher is about to exit with.
"""

from __future__ import annotations

import enum
from types import MappingProxyType

EX_OK = 0
# argparse exits 2 on a bad command line; the launcher's own usage errors exit 2 as well, so that every
# misuse reads the same to a script. This is not sysexits' EX_USAGE (64), which the launcher never returns.
EX_ARGPARSE_USAGE = 2
EX_TEMPFAIL = 75
EX_CONFIG = 78
EX_INTERRUPTED = 130  # as a shell reports a command that SIGINT ended
EX_BROKEN_PIPE = 141  # the reader of our output went away (`… | head`): 128 + SIGPIPE, as a shell tool dies


class Outcome(enum.Enum):
    """What a failure means to whoever started the launcher (and so whether anything should retry it)."""

    FAILED = "failed"  # none of the below: a bug or an unexpected error
    USAGE = "usage"  # the command as given cannot run: fix the command line (or the server it names)
    TEMPFAIL = "tempfail"  # may work later: systemd, a pod or the container loop may try again
    CONFIG = "config"  # can never work as configured: never retried


EXIT_CODES = MappingProxyType({Outcome.FAILED: 1, Outcome.USAGE: EX_ARGPARSE_USAGE,
                               Outcome.TEMPFAIL: EX_TEMPFAIL, Outcome.CONFIG: EX_CONFIG})


class LauncherError(Exception):
    """Base of every error the launcher reports to its operator."""

    outcome = Outcome.FAILED

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]


class UsageError(LauncherError):
    """The command line itself is wrong."""

    outcome = Outcome.USAGE


class ConfigError(LauncherError):
    """A profile, flag, model or GPU that can never work as configured: never retried."""

    outcome = Outcome.CONFIG


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

    outcome = Outcome.TEMPFAIL


class LadderExhausted(TransientFailure):
    """Every rung the profile allows was tried and failed."""
