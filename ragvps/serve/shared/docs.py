"""The OpenAPI document and /docs, its interactive page, which works offline and with keys.

Swagger UI's assets come from the `fastapi-offline` package (served at /docs/assets/), never from a CDN, so
the page works on a machine without outside access. The document declares the API-key scheme when keys are
set, so the page's Authorize button sends the key with "Try it out". The document and the page describe the
API and hold no data: they need no key (like / and /health).
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

if TYPE_CHECKING:
    from fastapi import FastAPI

ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "favicon.png": "image/png"}
OPEN_PATHS = frozenset({"/openapi.json", "/docs", "/docs/"} | {f"/docs/assets/{name}" for name in ASSETS})
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer KEY`"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "`X-API-Key: KEY`"},
}
OPEN_OPERATIONS = frozenset({"/health"})


def add_docs(api: FastAPI, keys: bool) -> None:
    """/docs and its assets, and the OpenAPI document as the server answers (400 errors, the key scheme)."""

    @api.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        # Relative URLs, so the page works under a reverse proxy's path prefix as well.
        return get_swagger_ui_html(
            openapi_url="openapi.json",
            title="ragvps API",
            swagger_js_url="docs/assets/swagger-ui-bundle.js",
            swagger_css_url="docs/assets/swagger-ui.css",
            swagger_favicon_url="docs/assets/favicon.png",
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": False},
        )

    @api.get("/docs/", include_in_schema=False)
    async def docs_slash() -> RedirectResponse:
        return RedirectResponse("../docs", status_code=308)  # relative: under a path prefix too

    @api.get("/docs/assets/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPException(404, f"no asset {name!r}: /docs serves {', '.join(sorted(ASSETS))}")
        data = resources.files("fastapi_offline").joinpath("static", name).read_bytes()
        return Response(data, media_type=ASSETS[name], headers={"Cache-Control": "public, max-age=86400"})

    _openapi(api, keys)


def _openapi(api: FastAPI, keys: bool) -> None:
    def schema() -> dict[str, object]:
        if api.openapi_schema is None:
            doc = get_openapi(title=api.title, version=api.version, description=api.description, routes=api.routes)
            for path, item in doc.get("paths", {}).items():
                for op in item.values():
                    op.get("responses", {}).pop("422", None)  # validation failures are sent as 400
                    _example(op, doc)
                    if keys:
                        op["security"] = [] if path in OPEN_OPERATIONS else [{"bearer": []}, {"apiKey": []}]
            components = doc.setdefault("components", {})
            for name in ("HTTPValidationError", "ValidationError"):
                components.get("schemas", {}).pop(name, None)
            if keys:
                components["securitySchemes"] = SECURITY_SCHEMES
            api.openapi_schema = doc
        return api.openapi_schema

    api.openapi = schema  # type: ignore[method-assign]


def _example(op: dict[str, object], doc: dict[str, object]) -> None:
    """A JSON body's first model-level example as the media type's named example, which is what Swagger UI's
    "Try it out" sends as it is (without one it makes a body up from the schema: `model: "string"`, `meta:
    {"additionalProp1": {}}`)."""
    media = _at(op, "requestBody", "content", "application/json")
    ref = _at(media, "schema", "$ref")
    found = _at(doc, "components", "schemas", ref.rsplit("/", 1)[-1] if isinstance(ref, str) else "")
    examples = _at(found, "examples")
    if isinstance(media, dict) and isinstance(examples, list) and examples:
        media["examples"] = {"question": {"summary": "A question", "value": examples[0]}}


def _at(value: object, *keys: str) -> object:
    """`value[k1][k2]...` through JSON objects; None where one is missing."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
