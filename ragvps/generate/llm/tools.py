"""A chat client's tools, tool_choice and response_format, and its messages with tool calls and results, as it
sent them (OpenAI's shapes), in the shapes of Anthropic's Messages API and Ollama's /api/chat. What a backend
cannot take is named before any request is made (`Unsupported`, answered as 400 unsupported_parameter)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Unsupported:
    """A field of the request this generator cannot honour, and what to do instead."""

    field: str
    message: str


def passed(tools: str) -> Json:
    """The passed fields (a JSON object's text, empty for none) as a dict."""
    return dict(json.loads(tools)) if tools else {}


def needs_llm(fields: Json) -> str | None:
    """The field that requires what only a language model gives (a tool call, JSON), or None: tools merely
    offered, tool_choice auto and a text response format are hints."""
    choice = fields.get("tool_choice")
    if fields.get("tools") and (choice == "required" or isinstance(choice, dict)):
        return "tool_choice"
    if (fields.get("response_format") or {}).get("type") in ("json_object", "json_schema"):
        return "response_format"
    return None


def text_of(content: Any) -> str:
    """A message's text: a string, or its text parts joined (images and other parts left out)."""
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text") or "")
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "input_text") and p.get("text")
        )
    return str(content or "")


def arguments(text: str) -> Any:
    """A tool call's arguments (JSON text, as OpenAI sends them) as the object Anthropic and Ollama take."""
    try:
        return json.loads(text or "{}")
    except ValueError:
        return {}


# --- Anthropic's Messages API -------------------------------------------------------------------------------


def anthropic_unsupported(fields: Json) -> Unsupported | None:
    if (fields.get("response_format") or {}).get("type") == "json_object":
        return Unsupported(
            "response_format",
            "generator=anthropic takes response_format json_schema (sent as "
            "output_config.format) but not json_object, for which Anthropic's API "
            "has no mode: send a json_schema, or leave response_format out",
        )
    return None


def anthropic_fields(fields: Json) -> Json:
    """tools, tool_choice (with parallel_tool_calls) and a json_schema response format, in Anthropic's shapes."""
    out: Json = {}
    functions = [t["function"] for t in fields.get("tools") or () if isinstance(t.get("function"), dict)]
    if functions:
        out["tools"] = [
            {
                "name": f["name"],
                "description": f.get("description") or "",
                "input_schema": f.get("parameters") or {"type": "object", "properties": {}},
            }
            for f in functions
        ]
        choice = fields.get("tool_choice") or "auto"
        if isinstance(choice, dict):
            out["tool_choice"] = {"type": "tool", "name": (choice.get("function") or {}).get("name", "")}
        else:
            out["tool_choice"] = {"type": {"required": "any"}.get(choice, choice)}
        if fields.get("parallel_tool_calls") is False and out["tool_choice"]["type"] != "none":
            out["tool_choice"]["disable_parallel_tool_use"] = True
    form = fields.get("response_format") or {}
    if form.get("type") == "json_schema":
        schema = (form.get("json_schema") or {}).get("schema") or {"type": "object"}
        out["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return out


def anthropic_messages(sent: list[Json]) -> tuple[str, list[Json]]:
    """The system text and the messages: an assistant's tool calls as `tool_use` blocks, a tool's result as a
    user turn's `tool_result` block; empty text blocks (Continue's assistant turn of " ") left out."""
    system = "\n\n".join(text_of(m.get("content")) for m in sent if m.get("role") in ("system", "developer"))
    messages: list[Json] = []
    for m in sent:
        role, text = m.get("role"), text_of(m.get("content")).strip()
        if role == "tool":
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": text}],
                }
            )
        elif role in ("user", "assistant"):
            blocks: list[Json] = [{"type": "text", "text": text}] if text else []
            for call in m.get("tool_calls") or () if role == "assistant" else ():
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "input": arguments(function.get("arguments", "")),
                    }
                )
            if blocks:
                messages.append({"role": role, "content": blocks})
    if not messages and system:  # one instruction as a system message (LibreChat's title request): the question
        return "", [{"role": "user", "content": [{"type": "text", "text": system}]}]
    return system, messages


# --- Ollama's /api/chat -------------------------------------------------------------------------------------


def ollama_unsupported(fields: Json) -> Unsupported | None:
    choice = fields.get("tool_choice")
    if fields.get("tools") and (choice == "required" or isinstance(choice, dict)):
        return Unsupported(
            "tool_choice",
            "generator=ollama cannot force a tool call (Ollama's /api/chat has no "
            "tool_choice; the model decides): send tool_choice auto, or leave it out",
        )
    return None


def ollama_fields(fields: Json) -> Json:
    """tools (Ollama takes OpenAI's function tools as they are; none with tool_choice none) and `format` from
    response_format (`json` for json_object, the schema for json_schema)."""
    out: Json = {}
    if fields.get("tools") and fields.get("tool_choice") != "none":
        out["tools"] = fields["tools"]
    form = fields.get("response_format") or {}
    if form.get("type") == "json_object":
        out["format"] = "json"
    elif form.get("type") == "json_schema":
        out["format"] = (form.get("json_schema") or {}).get("schema") or {"type": "object"}
    return out


def ollama_messages(sent: list[Json]) -> list[Json]:
    """Text content; an assistant's tool calls with their arguments as objects; a tool's result with the name
    of the tool that gave it (`tool_name`, found by its call's id)."""
    names: dict[str, str] = {}
    out: list[Json] = []
    for m in sent:
        role = "system" if m.get("role") == "developer" else m.get("role")
        said: Json = {"role": role, "content": text_of(m.get("content"))}
        calls = m.get("tool_calls") or ()
        if calls:
            said["tool_calls"] = [
                {
                    "function": {
                        "name": (c.get("function") or {}).get("name"),
                        "arguments": arguments((c.get("function") or {}).get("arguments", "")),
                    }
                }
                for c in calls
            ]
            names |= {str(c.get("id")): str((c.get("function") or {}).get("name")) for c in calls}
        if role == "tool" and m.get("tool_call_id") in names:
            said["tool_name"] = names[m["tool_call_id"]]
        out.append(said)
    return out
