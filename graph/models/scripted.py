"""scripted: a real chat model that replays a JSON script, for tests and the offline demo.

Script format (one file, documented in graph/models/README.md, "Scripted model"):

    {"model_id": "scripted-demo",
     "roles": {"planner": [STEP, ...], "actor": [...], "judge": [...], "critic": [...]}}
    STEP = {"content": "text" | {...JSON, sent as its JSON text...},
            "tool_calls": [{"name": "workspace__write_file", "args": {...}}],   # optional
            "usage": {"input_tokens": 120, "output_tokens": 30}}               # optional

Which step answers is decided by the caller, not by process memory: every node passes its role
and the number of calls that role has made so far (from checkpointed usage) as run metadata.
So a run killed mid-loop and resumed in a new process replays the very same responses. Asking
for a step the script does not have raises `ScriptExhausted` — loudly, never a silent default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from boundloop.graph.core.errors import ScriptError, ScriptExhausted

ROLE_KEY = "boundloop_role"
INDEX_KEY = "boundloop_call_index"
CHARS_PER_TOKEN = 4
"""Characters per token of the usage a step without its own `usage` reports, and of a reply cut at `max_tokens`."""


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ScriptedUsage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_tokens: int = 0
    output_tokens: int = 0


class ScriptStep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str | dict[str, Any] | list[Any] = ""
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    usage: ScriptedUsage | None = None


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model_id: str = "scripted"
    description: str = ""
    roles: dict[str, list[ScriptStep]]


def load_script(path: str | Path) -> Script:
    """Read and validate a script file; every problem names the file and the fix."""
    file = Path(path)
    try:
        raw = json.loads(file.read_text())
    except FileNotFoundError:
        raise ScriptError(f"script {str(file)!r} not found; pass --script with an existing JSON file") from None
    except json.JSONDecodeError as error:
        raise ScriptError(
            f"script {str(file)!r} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    try:
        return Script.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ScriptError(f"script {str(file)!r} is malformed at {where}: {first['msg']}") from None


class ScriptedChatModel(BaseChatModel):
    """Replays `script`; the step is chosen by the caller's (role, call index) metadata."""

    script: Script
    _last_request: dict[str, list[BaseMessage]] = PrivateAttr(default_factory=dict)

    def last_request(self, role: str) -> list[BaseMessage]:
        """The messages of the newest request `role` sent: what a test asserts the model was shown."""
        return self._last_request.get(role, [])

    @property
    def _llm_type(self) -> str:
        return "boundloop-scripted"

    @property
    def model_id(self) -> str:
        return self.script.model_id

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        # The script names its tool calls itself; offering tools changes nothing, as with a real
        # model that ignores some of them. Unknown names in the script reach the gate as unknown_tool.
        # A reply cap is kept: the reply stops at it (`_respond`).
        return self.bind(max_tokens=kwargs["max_tokens"]) if kwargs.get("max_tokens") is not None else self

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        return self._respond(messages, run_manager, kwargs.get("max_tokens"))

    async def _agenerate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        return self._respond(messages, run_manager, kwargs.get("max_tokens"))

    def _respond(self, messages: list[BaseMessage], run_manager: Any, max_tokens: int | None = None) -> ChatResult:
        metadata = getattr(run_manager, "metadata", None) or {}
        role, index = metadata.get(ROLE_KEY), metadata.get(INDEX_KEY)
        if role is None or index is None:
            raise ScriptError("the scripted model was called without boundloop role metadata; call it through the loop")
        steps = self.script.roles.get(role, [])
        if index >= len(steps):
            raise ScriptExhausted(
                f"{role} step {index + 1} requested; script has {len(steps)} {role} steps. "
                f"Add steps for role {role!r} to the script."
            )
        step = steps[index]
        self._last_request[role] = list(messages)
        content = step.content if isinstance(step.content, str) else json.dumps(step.content)
        usage = step.usage or ScriptedUsage(
            input_tokens=sum(len(str(message.content)) for message in messages) // CHARS_PER_TOKEN,
            output_tokens=len(content) // CHARS_PER_TOKEN + 1,
        )
        if max_tokens is not None and usage.output_tokens > max_tokens:  # a provider stops at the cap
            content = content[: max_tokens * CHARS_PER_TOKEN]
            usage = ScriptedUsage(input_tokens=usage.input_tokens, output_tokens=max_tokens)
        message = AIMessage(
            content=content,
            tool_calls=[
                {"name": call.name, "args": call.args, "id": f"call_{role}_{index}_{position}", "type": "tool_call"}
                for position, call in enumerate(step.tool_calls)
            ],
            usage_metadata={
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.input_tokens + usage.output_tokens,
            },
            response_metadata={"model_name": self.script.model_id},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])
