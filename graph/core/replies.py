"""replies: read a model's JSON reply into a typed object, or say exactly why not."""

from __future__ import annotations

import json
import re
from typing import TypeVar

from pydantic import BaseModel, ValidationError

Reply = TypeVar("Reply", bound=BaseModel)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_reply(text: str, kind: type[Reply]) -> tuple[Reply | None, str | None]:
    """`(object, None)` on success, `(None, reason)` when the reply is not the JSON asked for."""
    body = text.strip()
    if fenced := _FENCE.match(body):
        body = fenced.group(1)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as error:
        return None, f"reply is not JSON ({error.msg} at line {error.lineno} column {error.colno})"
    try:
        return kind.model_validate(data), None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(root)"
        return None, f"reply does not match the expected shape at {where}: {first['msg']}"
