"""Ollama's API shapes for /api (pydantic), which FastAPI turns into /openapi.json: the chat and show requests,
the model list, the model description and the error object."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class OllamaMessage(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: list[str] | None = Field(None, description="Accepted and ignored: the knowledge base is text.")
    tool_calls: list[dict[str, object]] | None = None


class OllamaOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    temperature: float | None = Field(None, ge=0, le=2)
    num_predict: int | None = Field(None, ge=1, le=1_000_000)


class OllamaChatIn(BaseModel):
    """Ollama's /api/chat request; what ragvps does not use (keep_alive, think, options it has no use for) is
    accepted and ignored."""

    model_config = ConfigDict(
        extra="allow",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "model": "ragvps",
                    "messages": [{"role": "user", "content": "how do I stop the embedded database?"}],
                    "stream": False,
                }
            ]
        },
    )
    model: str = Field(
        description="A knowledge base: `ragvps` (or `ragvps:latest`) for the server's own, others "
        "by name (GET /api/tags lists them).",
        examples=["ragvps"],
    )
    messages: list[OllamaMessage] = Field(min_length=1, max_length=1000)
    stream: bool = True
    options: OllamaOptions | None = None
    format: str | dict[str, object] | None = Field(None, description="`json` or a JSON schema: needs an LLM.")
    tools: list[dict[str, object]] | None = Field(None, description="Passed to an LLM; ignored without one.")


class OllamaShowIn(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra={"examples": [{"model": "ragvps"}]})
    model: str | None = Field(None, examples=["ragvps"])
    name: str | None = Field(None, description="The older field for model.")


class ModelDetails(BaseModel):
    format: str
    family: str
    families: list[str]
    parameter_size: str
    quantization_level: str


class ModelEntry(BaseModel):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: ModelDetails


class TagsOut(BaseModel):
    models: list[ModelEntry]


class RunningEntry(ModelEntry):
    expires_at: str
    size_vram: int


class PsOut(BaseModel):
    models: list[RunningEntry]


class VersionOut(BaseModel):
    version: str


class ShowOut(BaseModel):
    modified_at: str
    modelfile: str
    parameters: str
    template: str
    details: ModelDetails
    model_info: dict[str, object]
    capabilities: list[str]


class OllamaErrorOut(BaseModel):
    error: str
    kind: str | None = None
