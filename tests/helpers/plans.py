"""Launch plans whose argv is any command: the supervisor's process handling on a plain child process."""

from __future__ import annotations

from launcher.vllm import command
from tests.helpers.profiles import load_profile


def plan_for(argv: list[str]) -> command.Plan:
    """The plan of a minimal profile with its argv replaced by `argv`, and short stop and drain times."""
    plan = command.build_plan(load_profile())
    return command.Plan(tuple(argv), plan.env, (), plan.flags, plan.overrides, plan.base_url,
                        plan.served_model_name, 30.0, 30.0, 1.0)
