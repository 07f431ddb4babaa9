"""approvals_prompt: ask a person at the terminal to decide what a run waits for, one by one:
tool approvals, questions, budget extensions, result reviews and plan approvals."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any

import typer

from boundloop.graph.run.runner import asks_left


def ask_decisions(interrupts: list[dict[str, Any]]) -> dict[str, Any]:
    """Prompt for each pending interrupt; returns {interrupt_id: decision} for Command(resume=...)."""
    decisions: dict[str, Any] = {}
    for item in interrupts:
        request = item["value"]
        if request.get("type") == "elicitation":
            decisions[item["id"]] = _elicitation(request)
            continue
        if request.get("type") != "tool_approval":
            decisions[item["id"]] = _escalation(request)
            continue
        if request.get("refused"):
            typer.echo(f"\nThe last decision was refused: {request['refused']} ({asks_left(request)})")
        typer.echo(f"\nApproval needed: {request.get('name')} ({request.get('rule')}: {request.get('reason')})")
        typer.echo(json.dumps(request.get("args"), indent=2))
        choice = typer.prompt("[a]pprove, [r]eject, [e]dit, re[s]pond", default="a").strip().lower()[:1]
        approver = os.environ.get("USER", "terminal")
        if choice == "r":
            decisions[item["id"]] = {"decision": "reject", "message": typer.prompt("message for the model", default="rejected"), "approver": approver}
        elif choice == "e":
            decisions[item["id"]] = {"decision": "edit", "args": _edit(request.get("args") or {}), "approver": approver}
        elif choice == "s":
            decisions[item["id"]] = {"decision": "respond", "result": typer.prompt("result to give the model"), "approver": approver}
        else:
            decisions[item["id"]] = {"decision": "approve", "approver": approver}
    return decisions


def _escalation(request: dict[str, Any]) -> dict[str, Any]:
    """Answer a question, a budget extension, a review or a plan approval."""
    approver = os.environ.get("USER", "terminal")
    kind = request.get("type")
    if kind == "ask_user":
        return {"answer": typer.prompt(f"\n{request['question']}\nanswer (empty to stop)", default=""), "approver": approver}
    if kind == "budget_extension":
        typer.echo(f"\n{request['reason']}")
        limit = typer.prompt(f"new limit for {request['dimension']} (empty to stop)", default="")
        return {"grant": {request["dimension"]: json.loads(limit)} if limit else None, "approver": approver}
    shown = request.get("output") if kind == "review" else json.dumps(request.get("steps"), indent=2)
    typer.echo(f"\n{kind}: {request.get('reason', '')}\n{shown}")
    accepted = typer.confirm("accept?", default=True)
    return {"accept": accepted, "message": None if accepted else typer.prompt("why", default="rejected"), "approver": approver}


def _edit(args: dict[str, Any]) -> dict[str, Any]:
    """Edit arguments as JSON: in $EDITOR when set, else typed inline."""
    editor = os.environ.get("EDITOR")
    if not editor:
        return json.loads(typer.prompt("new arguments (JSON)", default=json.dumps(args)))
    with tempfile.NamedTemporaryFile("w+", suffix=".json", delete=False) as handle:
        json.dump(args, handle, indent=2)
    subprocess.run([editor, handle.name], check=False)
    with open(handle.name) as edited:
        return json.load(edited)


def _elicitation(question: dict[str, Any]) -> dict[str, Any]:
    """A server's question during a tool call (graph/calls/elicitation.py), answered field by field."""
    if question.get("refused"):
        typer.echo(f"\nThat answer was refused: {question['refused']} ({asks_left(question)})")
    typer.echo(f"\nMCP server {question['server']!r} asks, during {question['tool']}: {question['message']}")
    if question.get("resend_warning"):
        typer.echo(f"Note: {question['resend_warning']}")
    choice = typer.prompt("[a]nswer, [d]ecline, [c]ancel", default="a").strip().lower()[:1]
    approver = os.environ.get("USER", "terminal")
    if choice in ("d", "c"):
        return {"action": "decline" if choice == "d" else "cancel", "approver": approver}
    content: dict[str, Any] = {}
    schema = question.get("schema") or {}
    required = set(schema.get("required") or [])
    for name, prop in (schema.get("properties") or {}).items():
        hint = prop.get("description") or prop.get("title") or ""
        options = f" one of {prop['enum']}" if "enum" in prop else f" ({prop.get('type', 'string')})"
        shown = f"{name}{options}{' — ' + hint if hint else ''}{'' if name in required else ' [empty: leave out]'}"
        text = typer.prompt(shown, default=str(prop.get("default", "")), show_default="default" in prop)
        if text == "" and name not in required:
            continue
        content[name] = _typed(text, prop.get("type"))
    return {"action": "accept", "content": content, "approver": approver}


def _typed(text: str, kind: str | None) -> Any:
    """The typed value for a flat elicitation field; left as text when it does not parse (the
    schema check then says what was wrong and the question is asked again)."""
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
        if kind == "boolean":
            return {"true": True, "yes": True, "y": True, "false": False, "no": False, "n": False}[text.strip().lower()]
    except (ValueError, KeyError):
        return text
    return text
