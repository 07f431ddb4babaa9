"""arguments: check a proposed call's arguments against the tool's input schema.

Owns the `invalid_arguments` messages the model reads to repair its call: each names the
argument path, the offending value (truncated) and what was expected. Uses the JSON Schema
draft the schema declares in `$schema` (draft 7 and friends), Draft 2020-12 when it declares
none, as MCP specifies. Never coerces or fills in arguments: what is validated is what is sent.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from boundloop.tools.registry import ToolSpec

MAX_MESSAGES = 10
_VALUE_CHARS = 80

# Model-facing texts.
NOT_AN_OBJECT = 'arguments: expected a JSON object of named arguments, got {kind} {value}. Send {{"name": value, ...}}.'
BROKEN_SCHEMA = "the input schema of {tool} is itself invalid ({error}), so no call to it can be checked. Use another tool."
MORE_ERRORS = "... and {count} more problem(s) of the same call."

_EXPECTATIONS = {
    "minimum": "a number >= {v}",
    "maximum": "a number <= {v}",
    "exclusiveMinimum": "a number > {v}",
    "exclusiveMaximum": "a number < {v}",
    "multipleOf": "a multiple of {v}",
    "minLength": "a string of at least {v} characters",
    "maxLength": "a string of at most {v} characters",
    "pattern": "a string matching the pattern {v!r}",
    "minItems": "a list of at least {v} items",
    "maxItems": "a list of at most {v} items",
    "uniqueItems": "a list without duplicates",
    "minProperties": "an object with at least {v} keys",
    "maxProperties": "an object with at most {v} keys",
    "const": "exactly {v_json}",
    "enum": "one of {v_json}",
    "format": "a string in {v} format",
}
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}


def validate(spec: ToolSpec, arguments: Any) -> list[str]:
    """Every way `arguments` breaks `spec.input_schema`, as model-readable lines; empty when valid."""
    if not isinstance(arguments, dict):
        return [NOT_AN_OBJECT.format(kind=_json_type(arguments), value=_short(arguments))]
    schema = spec.input_schema or {"type": "object"}
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except SchemaError as exc:
        return [BROKEN_SCHEMA.format(tool=spec.qualified_name, error=_clip(exc.message, 160))]
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(map(str, e.absolute_path)), e.validator or ""))
    messages = [_message(error) for error in errors[:MAX_MESSAGES]]
    if len(errors) > MAX_MESSAGES:
        messages.append(MORE_ERRORS.format(count=len(errors) - MAX_MESSAGES))
    return messages


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Validator:
    """One checked validator per distinct schema: tools are called many times with one schema."""
    schema = json.loads(schema_json)
    cls = validator_for(schema, default=Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def _message(error: ValidationError) -> str:
    where = _path(error)
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind == "required" and isinstance(value, dict):
        missing = [name for name in expected if name not in value]
        return f"{where}: missing required argument(s) {', '.join(map(repr, missing))}."
    if kind == "additionalProperties" and isinstance(value, dict):
        allowed = sorted((error.schema.get("properties") or {}).keys())
        extra = sorted(set(value) - set(allowed))
        return f"{where}: unexpected argument(s) {', '.join(map(repr, extra))}; allowed: {', '.join(allowed) or 'none'}."
    if kind == "type":
        wanted = " or ".join(expected) if isinstance(expected, list) else expected
        return f"{where}: expected {wanted}, got {_json_type(value)} {_short(value)}."
    if kind in _EXPECTATIONS:
        expectation = _EXPECTATIONS[kind].format(v=expected, v_json=_short(expected))
        return f"{where}: expected {expectation}, got {_short(value)}."
    return f"{where}: {_clip(error.message, 200)}."


def _path(error: ValidationError) -> str:
    text = "arguments"
    for part in error.absolute_path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except ValueError:  # circular structures cannot come from JSON, but a caller may still pass one
        text = repr(value)
    return _clip(text, _VALUE_CHARS)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + f"... ({len(text)} chars)"
