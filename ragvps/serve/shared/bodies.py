"""What the server says about a request it cannot read: the wrong Content-Type (415), JSON that does not
parse (with its line and column), a body that is not UTF-8, a method the path does not take (405 naming the
ones it does), and values that do not fit the request's shape (400, field by field)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

SHAPE = " (see /docs for the request's shape)"


def is_json(content_type: str | None) -> bool:
    kind = (content_type or "").split(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def invalid_request(errors: Sequence[ErrorDetails], body: object, content_type: str | None) -> tuple[int, str]:
    """The status and message for FastAPI's RequestValidationError."""
    errors = list(errors)
    if isinstance(body, bytes | bytearray) and body and not is_json(content_type):
        sent = f"it was sent as {content_type.split(';')[0].strip()}" if content_type else "it was sent without one"
        return 415, f"send Content-Type: application/json with a JSON body ({sent})"
    for e in errors:
        if e.get("type") == "json_invalid":
            return 400, "the body is not valid JSON: " + json_position(e, body) + SHAPE
    parts = []
    for e in errors[:3]:
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return 400, "the request is not valid: " + "; ".join(parts) + SHAPE


def json_position(error: ErrorDetails, doc: object) -> str:
    """`Expecting value at line 2, column 7` from a json_invalid error and the text it was raised on."""
    reason = str((error.get("ctx") or {}).get("error") or "it does not parse")
    loc = error.get("loc", ())
    pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
    if pos is None or not isinstance(doc, str):
        return reason
    line = doc.count("\n", 0, pos) + 1
    column = pos - (doc.rfind("\n", 0, pos) + 1) + 1
    return f"{reason} at line {line}, column {column}"


def http_message(
    status: int, detail: str, method: str, path: str, allow: str | None, wrong_turn: Callable[[str], str | None]
) -> str:
    """A framework's own HTTPException in words that say what to do; `wrong_turn` names the door a lost client
    meant (the OpenAI door's, which the app factory passes)."""
    if status == 405:
        allowed = allow or "another method"
        return f"{path} does not take {method}: use {allowed}"
    if status == 400 and detail == "There was an error parsing the body":
        return "the body could not be read as JSON: send JSON text encoded as UTF-8" + SHAPE
    if status == 404 and detail == "Not Found":
        return wrong_turn(path) or (
            f"there is no {path} here: the API is /search, /ask, /stats and /health, "
            "OpenAI's chat under /v1, Ollama's under /api (see /docs)"
        )
    return detail
