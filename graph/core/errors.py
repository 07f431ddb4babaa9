"""errors: what stops boundloop from starting or continuing a run — shown to a person, never to the model.

    BoundloopError
    ├── ConfigError          a flag, config file, task file or script is malformed
    ├── ModelNotConfigured   no API key and no script: says how to configure one or the other
    ├── ScriptError          the scripted model's script is unusable
    │   └── ScriptExhausted  the run asked for more steps of a role than the script has
    ├── RunNotFound          no run with that id in this database
    ├── RunExists            the thread already holds a run (of another task, or unfinished)
    ├── SettingsMissing      a run reached intake with no settings in its input, state or context
    └── RunStopped           a run stopped on an error; it keeps its last checkpoint

Tool failures the model can correct travel as tool results (boundloop.tools.outcome), not as these.
"""

from __future__ import annotations


class BoundloopError(Exception):
    """Base class: the message names the thing, the value and the fix."""


class ConfigError(BoundloopError):
    pass


class ModelNotConfigured(BoundloopError):
    pass


class ScriptError(BoundloopError):
    pass


class ScriptExhausted(ScriptError):
    pass


class RunNotFound(BoundloopError):
    pass


class SettingsMissing(BoundloopError, RuntimeError):
    """Raised, not turned into an ending: the run keeps its checkpoint and can be resumed with them.
    A RuntimeError too: the LangGraph server shows the message of builtin error types only."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            f"run {thread_id} has no settings: none were checkpointed with its input and none were passed as the "
            f"run's context. Run the thread again with context=RunSettings(...) (model, script or base_url, "
            f"workspace_root or servers), e.g. the settings it was started with."
        )


class RunStopped(BoundloopError):
    def __init__(self, run_id: str, cause: BaseException) -> None:
        super().__init__(
            f"run {run_id} stopped: {cause}. It keeps its last checkpoint; "
            f"fix the cause and continue with `boundloop resume {run_id}`."
        )
        self.run_id = run_id


class RunExists(BoundloopError):
    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(
            f"run {run_id} already exists with status {status} for a different or unfinished task; "
            f"continue it with `boundloop resume {run_id}` or start a new run without --thread."
        )
