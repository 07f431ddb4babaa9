"""sends: a tool task's `Send`, which names its call, and the state the task reads the rest from.

LangGraph stores a Send's argument twice for every call (a write of the routing step, then the
next checkpoint's pending tasks), and gives an execute or approve task nothing else. So the Send
holds the call's id only. Everything else the task needs (the call as admitted or approved, the
run's pinned tools, settings, budget, usage, breakers) is in the run's state at the step that sent
it, which is the state the task's own step starts from: in this process, or restored from that
saved checkpoint after a crash. `task_state()` reads it through the task's config, and
`guards.task_payload` builds the payload from it exactly as the routing guard saw it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph._internal._constants import CONFIG_KEY_READ  # the channel reader LangGraph gives every task (1.2.x, pinned)
from langgraph.config import get_config
from langgraph.types import Send

from boundloop.graph.state import LoopState

READ = ("task", "settings", "budget", "tools", "usage", "breakers", "plan", "dispatch", "approvals")
"""The channels a tool task's payload is built from (guards.task_payload)."""


def send(node: str, call: Mapping[str, Any]) -> Send:
    return Send(node, {"call_id": call["call_id"]})


def call_id(arg: dict[str, Any]) -> str:
    """The call a stored Send names (one saved before Sends held only the id carried the whole call)."""
    return arg["call_id"] if "call_id" in arg else arg["call"]["call_id"]


def task_state() -> LoopState:
    """The run's state (the `READ` channels) at the start of the running task's step."""
    return get_config()["configurable"][CONFIG_KEY_READ](list(READ))
