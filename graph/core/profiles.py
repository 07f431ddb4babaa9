"""profiles: the risk-profile presets (budget defaults; policy rules live in boundloop.tools.policy).

Research, coding and SRE each have budget numbers of their own. The support and procurement
agents follow the research assistant (read-heavy, no autonomous mutation) with a tighter cost ceiling for procurement.
"""

from __future__ import annotations

from typing import Literal, Mapping

from boundloop.graph.core.budget import Budget

ProfileName = Literal["research_assistant", "coding_assistant", "support_agent", "procurement_agent", "sre_agent"]

PROFILES: dict[str, Budget] = {
    "research_assistant": Budget(
        model_turns=15, tool_calls=30, input_tokens=200_000, output_tokens=30_000, wall_clock_s=300,
        cost_usd=2.00, retries=3, repairs=1, side_effects=0, memory_writes=2,
    ),
    "coding_assistant": Budget(
        model_turns=30, tool_calls=50, input_tokens=400_000, output_tokens=60_000, wall_clock_s=600,
        cost_usd=5.00, retries=5, repairs=2, side_effects=2, memory_writes=5,
    ),
    "support_agent": Budget(
        model_turns=15, tool_calls=30, input_tokens=200_000, output_tokens=30_000, wall_clock_s=300,
        cost_usd=2.00, retries=3, repairs=1, side_effects=0, memory_writes=2,
    ),
    "procurement_agent": Budget(
        model_turns=15, tool_calls=30, input_tokens=200_000, output_tokens=30_000, wall_clock_s=300,
        cost_usd=1.00, retries=2, repairs=1, side_effects=0, memory_writes=2,
    ),
    "sre_agent": Budget(
        model_turns=10, tool_calls=15, input_tokens=100_000, output_tokens=15_000, wall_clock_s=120,
        cost_usd=1.00, retries=2, repairs=1, side_effects=0, memory_writes=0,
    ),
}


def budget_for(profile: str, overrides: Mapping[str, object] | None = None) -> Budget:
    """The profile's budget with per-run overrides applied (each dimension can be overridden)."""
    base = PROFILES[profile].model_dump()
    base.update(overrides or {})
    return Budget.model_validate(base)
