"""pending_trace: trace events waiting for the save of the step that made them.

A node's events are held under its task — (thread, namespace, the checkpoint the task started
from, task id) — until the saver writes that task's result (`BoundloopSaver.aput_writes`), or,
when LangGraph saves no per-task writes (durability "exit"), the next checkpoint after it
(`aput`). The saver writes them in the same transaction, so a step's events exist exactly when
its saved result does. Holds no connection and writes nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NS_SEP = "|"
"""LangGraph's separator between the levels of a task's checkpoint namespace."""

Event = tuple[str, str, str | None, Any]
"""(thread id, kind, node, data) of one trace row."""


@dataclass(frozen=True)
class TaskKey:
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str

    @classmethod
    def of_task(cls, thread_id: str, task_ns: str, checkpoint_id: str, task_id: str) -> TaskKey:
        """The key of a running task (its `ExecutionInfo`): its namespace is `<parent ns>|<name>:<task id>`,
        the saver sees the parent's."""
        return cls(str(thread_id), task_ns.rpartition(NS_SEP)[0], checkpoint_id, task_id)

    @classmethod
    def of_writes(cls, configurable: dict[str, Any], task_id: str) -> TaskKey:
        """The key of the writes LangGraph asks the saver to store."""
        return cls(str(configurable["thread_id"]), configurable.get("checkpoint_ns", ""), str(configurable["checkpoint_id"]), task_id)


class PendingTrace:
    """Events by task, in the order they were held."""

    def __init__(self) -> None:
        self._events: dict[TaskKey, list[Event]] = {}

    def hold(self, key: TaskKey, events: list[Event]) -> None:
        self._events.setdefault(key, []).extend(events)

    def take(self, key: TaskKey) -> list[Event]:
        return self._events.pop(key, [])

    def drop(self, key: TaskKey) -> None:
        """The task failed: LangGraph runs it again, and it makes its events again."""
        self._events.pop(key, None)

    def take_through(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> list[Event]:
        """The events of every task of the thread that started from `checkpoint_id` or an earlier
        checkpoint (LangGraph's checkpoint ids sort in time order): those a new checkpoint on top of
        `checkpoint_id` settles."""
        if checkpoint_id is None:
            return []
        keys = [key for key in self._events
                if key.thread_id == str(thread_id) and key.checkpoint_ns == checkpoint_ns and key.checkpoint_id <= checkpoint_id]
        return [event for key in keys for event in self._events.pop(key)]

    def __len__(self) -> int:
        return sum(len(events) for events in self._events.values())
