"""tools/dispatch.py: only safe calls are retried, with jittered exponential backoff; long text is bounded."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from boundloop.tools import pinning
from boundloop.tools.bridge import MCPBridge
from boundloop.tools.config import load_servers
from boundloop.tools.dispatch import call_with_retry, bound_text
from boundloop.tools.registry import ToolSpec


def spec_of(bridge: MCPBridge, qualified: str) -> ToolSpec:
    return next(spec for spec in bridge.specs() if spec.qualified_name == qualified)


class RecordedSleeps(list[float]):
    """An injected `sleep` that records the delay and returns at once."""

    async def __call__(self, delay_s: float) -> None:
        self.append(delay_s)


async def test_a_read_only_call_is_retried_with_jittered_backoff_until_it_answers(shared_bridge: MCPBridge) -> None:
    """flaky hangs twice then answers: two timeouts, two backoff sleeps, then ok on attempt 3."""
    sleeps = RecordedSleeps()
    outcome = await call_with_retry(
        shared_bridge, spec_of(shared_bridge, "probe__flaky"), {"key": "retry-ok", "hangs": 2},
        timeout_s=0.2, max_attempts=4, sleep=sleeps, rng=random.Random(7),
    )
    assert (outcome.status, outcome.text, outcome.attempts) == ("ok", "answered on call 3", 3)
    jitter = random.Random(7)
    assert sleeps == [jitter.uniform(0.0, 0.5), jitter.uniform(0.0, 1.0)]


async def test_retries_stop_at_max_attempts_and_the_delay_is_capped(shared_bridge: MCPBridge) -> None:
    sleeps = RecordedSleeps()
    outcome = await call_with_retry(
        shared_bridge, spec_of(shared_bridge, "probe__flaky"), {"key": "retry-never", "hangs": 99},
        timeout_s=0.2, max_attempts=4, sleep=sleeps, rng=random.Random(1), base_delay_s=1.0, max_delay_s=1.5,
    )
    assert (outcome.status, outcome.attempts) == ("timeout", 4)
    assert outcome.detail.endswith("(after 4 attempts)")
    assert len(sleeps) == 3 and all(0.0 <= delay <= cap for delay, cap in zip(sleeps, [1.0, 1.5, 1.5]))


async def test_a_non_idempotent_write_is_never_retried(shared_bridge: MCPBridge) -> None:
    sleeps = RecordedSleeps()
    outcome = await call_with_retry(
        shared_bridge, spec_of(shared_bridge, "probe__write_note"), {"note": "x", "delay_s": 30},
        timeout_s=0.2, max_attempts=5, sleep=sleeps,
    )
    assert (outcome.status, outcome.attempts, sleeps) == ("timeout", 1, [])


async def test_an_untrusted_read_only_claim_does_not_earn_a_retry(shared_bridge: MCPBridge) -> None:
    """A retry relaxes the rule 'run once'; an untrusted server's hint may not relax anything."""
    untrusted = dataclasses.replace(spec_of(shared_bridge, "probe__flaky"), trusted=False)
    sleeps = RecordedSleeps()
    outcome = await call_with_retry(
        shared_bridge, untrusted, {"key": "untrusted", "hangs": 1}, timeout_s=0.2, max_attempts=3, sleep=sleeps,
    )
    assert (outcome.status, outcome.attempts, sleeps) == ("timeout", 1, [])


async def test_a_tool_error_is_an_answer_not_a_transient(shared_bridge: MCPBridge) -> None:
    sleeps = RecordedSleeps()
    outcome = await call_with_retry(
        shared_bridge, spec_of(shared_bridge, "probe__fail"), {}, timeout_s=5, max_attempts=3, sleep=sleeps,
    )
    assert (outcome.status, outcome.attempts, sleeps) == ("tool_error", 1, [])


async def test_a_server_known_to_be_down_is_not_waited_for(log_dir: Path) -> None:
    """Nothing was dispatched (attempts 0), so backing off could not help."""
    bridge = MCPBridge(load_servers({"mcpServers": {"ghost": {"command": "/nonexistent/x", "trusted": True}}}), log_dir=log_dir)
    await bridge.start(strict=False)
    try:
        spec = ToolSpec(server="ghost", name="read", description="", input_schema={}, trusted=True)
        spec = dataclasses.replace(spec, hints=dataclasses.replace(spec.hints, read_only=True))
        sleeps = RecordedSleeps()
        outcome = await call_with_retry(bridge, spec, {}, timeout_s=5, max_attempts=3, sleep=sleeps)
        assert (outcome.status, outcome.attempts, sleeps) == ("server_unavailable", 0, [])
    finally:
        await bridge.close()


async def test_max_attempts_below_one_is_refused(shared_bridge: MCPBridge) -> None:
    with pytest.raises(ValueError, match="max_attempts must be at least 1 \\(got 0\\); pass 1 for no retries"):
        await call_with_retry(shared_bridge, spec_of(shared_bridge, "probe__echo"), {"text": "x"}, timeout_s=1, max_attempts=0)


def test_short_text_passes_unchanged() -> None:
    assert bound_text("x" * 300, 300) == ("x" * 300, False)


def test_long_text_keeps_head_and_tail_and_says_what_was_cut() -> None:
    text = "H" * 500 + "M" * 10_000 + "T" * 500
    excerpt, truncated = bound_text(text, 400)
    marker = ("\n[... 10713 of 11000 characters cut here; the full output is stored. "
              "Ask for a narrower part if you need it ...]\n")
    assert truncated
    assert excerpt == "H" * 144 + marker + "T" * 143
    assert len(excerpt) == 400


def test_bound_text_needs_room_for_its_marker() -> None:
    with pytest.raises(ValueError, match="max_chars must be at least 200 \\(got 50\\)"):
        bound_text("x" * 1000, 50)


async def test_a_retry_that_is_not_sent_leaves_the_outcome_of_the_attempt_that_was(shared_bridge: MCPBridge) -> None:
    """The check before a retry refuses it (here, a pin the server's definition no longer matches):
    the call's outcome is the timeout of the attempt that was sent, whose effect is what stays
    unknown (a ledger keeps it so), with the refusal in its detail; not the refusal."""
    live = spec_of(shared_bridge, "probe__flaky")
    pinned = dataclasses.replace(live, description=live.description + " (as pinned)")
    sleeps = RecordedSleeps()
    outcome = await call_with_retry(pinning.RecheckedRetries(shared_bridge, pinned), pinned, {"key": "retry-refused", "hangs": 1},
                                    timeout_s=0.2, max_attempts=3, sleep=sleeps)
    assert (outcome.status, outcome.attempts, len(sleeps)) == ("timeout", 1, 1)
    assert "the retry was not sent: definition pinned at intake" in outcome.detail
