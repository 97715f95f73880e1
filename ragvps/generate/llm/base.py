"""The part every LLM client shares: one streaming HTTP request on httpx, bounded retries, and errors
translated into one line that says what to do. A provider implements `request` and `read` only."""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ragvps import tokens
from ragvps.config import GenerateSettings
from ragvps.errors import GeneratorError
from ragvps.generate.records import Quote, ToolCall, Usage

if TYPE_CHECKING:
    import httpx

    from ragvps.generate.budget import Fit
    from ragvps.generate.llm.tools import Unsupported

log = logging.getLogger(__name__)

MAX_RETRY_AFTER = 60.0  # seconds: a longer Retry-After fails now, with the wait in the message
_CONTEXT = re.compile(r"context|too long|too many tokens|maximum.{0,40}tokens|exceed", re.IGNORECASE)


@dataclass
class Tally:
    """The token counts a provider's reader fills in as the stream tells them (then frozen as a Usage)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_creation_tokens: int = 0
    counted: bool = False  # the provider reported none: counted here (see `count_missing`)

    def frozen(self) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            cache_creation_tokens=self.cache_creation_tokens,
            counted=self.counted,
        )

    def count_missing(self, fit: Fit, text: str) -> None:
        """What the provider did not report (llama.cpp's server sends no usage in a stream, whatever
        stream_options asks), counted with tiktoken from the prompt sent and the text received, and marked."""
        if self.prompt_tokens and (self.completion_tokens or not text):
            return
        self.counted = True
        self.prompt_tokens = self.prompt_tokens or fit.prompt_tokens
        self.completion_tokens = self.completion_tokens or tokens.count_llm(text, fit.encoding)


@dataclass
class Stream:
    """What a provider's reader learns from the stream besides the text."""

    usage: Tally = field(default_factory=Tally)
    finish: str = ""  # the provider's stop reason
    done: bool = False  # the stream ended the way the protocol ends it
    calls: dict[int, dict[str, str]] = field(default_factory=dict)  # tool calls by index: id, name, arguments

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(c.get("id", ""), c.get("name", ""), c.get("arguments", "")) for _, c in sorted(self.calls.items())
        )


@dataclass(frozen=True)
class Generation:
    text: str
    usage: Usage
    finish: str = ""
    quotes: tuple[Quote, ...] = ()  # extractive: each quote's source and span
    tool_calls: tuple[ToolCall, ...] = ()  # the functions the LLM called (a chat client's tools)


@dataclass(frozen=True)
class Request:
    path: str  # appended to generator_url
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict, repr=False)


class StreamError(Exception):
    """The provider reported an error inside a stream that had started."""


class Provider(Protocol):
    name: str
    default_url: str

    def request(self, fit: Fit, settings: GenerateSettings) -> Request: ...

    def unsupported(self, tools: str) -> Unsupported | None:
        """The passed field (a chat client's tools, tool_choice, response_format) this API cannot take."""
        ...

    def read(self, lines: Iterator[str], stream: Stream) -> Iterator[str]:
        """The answer's text pieces from the response lines; fills `stream`."""
        ...


class LLM:
    """A generator backed by one provider's HTTP API."""

    extractive = False
    version = "1"

    def __init__(self, provider: Provider, settings: GenerateSettings):
        self.provider = provider
        self.settings = settings
        self.name = provider.name
        self.model = settings.model
        self.url = (settings.url or provider.default_url).rstrip("/")
        self.sleep: Callable[[float], None] = time.sleep
        self._client: httpx.Client | None = None

    def client(self) -> httpx.Client:
        import httpx  # lazy: the default extractive generator imports this module and sends no HTTP (httpx: 75 ms)

        if self._client is None:
            timeout = httpx.Timeout(float(self.settings.timeout), connect=min(10.0, float(self.settings.timeout)))
            self._client = httpx.Client(timeout=timeout)
        return self._client

    def unsupported(self, tools: str) -> Unsupported | None:
        return self.provider.unsupported(tools)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def generate(self, fit: Fit, on_token: Callable[[str], None]) -> Generation:
        """Stream the answer to `on_token`; if the callback raises, the connection is closed at once."""
        import httpx  # lazy: the default extractive generator imports this module and sends no HTTP (httpx: 75 ms)

        if not self.model:
            raise GeneratorError(
                f"generator={self.name} needs a model: set generator_model (RAGVPS_GENERATOR_MODEL)",
                kind="config",
                settings=("generator_model",),
            )
        req = self.provider.request(fit, fit.settings)  # the settings with the request's overrides
        url = self.url + req.path
        attempts = self.settings.retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                with self.client().stream("POST", url, json=req.body, headers=req.headers) as response:
                    if response.status_code != 200:
                        wait = self._refused(response, attempt, last)
                        log.info("%s answered HTTP %s; retrying in %.1f s", self.name, response.status_code, wait)
                        self.sleep(wait)
                        continue
                    return self._read(response, on_token, fit)
            except httpx.TimeoutException as exc:
                if last:
                    raise GeneratorError(
                        f"{self.name} at {self.url} did not answer within generator_timeout={self.settings.timeout} s "
                        f"({type(exc).__name__}), {attempts} attempt(s): raise generator_timeout or check the server",
                        settings=("generator_timeout",),
                    ) from None
            except httpx.TransportError as exc:
                if last:
                    raise GeneratorError(
                        f"cannot connect to {self.name} at {self.url} ({_reason(exc)}): check generator_url "
                        "and that the server is running",
                        settings=("generator_url",),
                    ) from None
            self.sleep(_backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, response: httpx.Response, on_token: Callable[[str], None], fit: Fit) -> Generation:
        import httpx  # lazy: the default extractive generator imports this module and sends no HTTP (httpx: 75 ms)

        stream = Stream()
        pieces: list[str] = []
        try:
            for piece in self.provider.read(response.iter_lines(), stream):
                pieces.append(piece)
                on_token(piece)
        except (httpx.TransportError, StreamError, ValueError) as exc:
            raise GeneratorError(
                f"the answer stream from {self.name} at {self.url} broke after {sum(map(len, pieces)):,} characters "
                f"({_reason(exc)}); nothing was cached: ask again"
            ) from None
        if not stream.done and not stream.calls:
            raise GeneratorError(
                f"the answer stream from {self.name} at {self.url} ended mid-answer after "
                f"{sum(map(len, pieces)):,} characters; nothing was cached: ask again"
            )
        text = "".join(pieces)
        calls = stream.tool_calls()
        stream.usage.count_missing(fit, text + "".join(c.name + c.arguments for c in calls))
        return Generation(text=text, usage=stream.usage.frozen(), finish=stream.finish, tool_calls=calls)

    def _refused(self, response: httpx.Response, attempt: int, last: bool) -> float:
        """Raise the error for a refused request, or return how long to wait before the retry."""
        response.read()
        status, message = response.status_code, self._message(response)
        where = f"{self.name} at {self.url}"
        if status in (401, 403):
            env = self.settings.backend.key_env
            unset = "no key is set: set RAGVPS_GENERATOR_API_KEY (setting generator_api_key)" + f" or {env}" * bool(env)
            hint = (
                unset
                if not self.settings.api_key
                else "check the key in RAGVPS_GENERATOR_API_KEY (setting "
                "generator_api_key) and that it may use this model"
            )
            raise GeneratorError(
                f"{where} refused the API key (HTTP {status}): {hint}", kind="config", settings=("generator_api_key",)
            )
        if status == 404:
            if "model" in message.lower():
                todo = self.settings.backend.missing_model
                pull = "; " + todo.format(model=self.model) if todo else ""
                raise GeneratorError(
                    f"{where} has no model {self.model!r} (HTTP 404: {message}): check generator_model{pull}",
                    kind="config",
                    settings=("generator_model",),
                )
            raise GeneratorError(
                f"{where} has no API at {response.request.url.path} (HTTP 404): "
                f"check generator_url (e.g. "
                f"{self.provider.default_url})",
                kind="config",
                settings=("generator_url",),
            )
        if status in (400, 413, 422) and _CONTEXT.search(message):
            raise GeneratorError(
                f"{where} says the prompt is too long for the model (HTTP {status}: {message}); "
                "set context_window to the model's real window (or lower answer_chunks)",
                kind="too_long",
                settings=("context_window", "answer_chunks"),
            )
        if status == 429 or status >= 500:
            wait = _retry_after(response.headers.get("retry-after"))
            if status == 429 and wait is not None and wait > MAX_RETRY_AFTER:
                raise GeneratorError(
                    f"{where} is rate limiting (HTTP 429) and asks to wait {wait:.0f} s: ask again later"
                )
            if last:
                what = "is rate limiting (HTTP 429)" if status == 429 else f"failed (HTTP {status}: {message})"
                raise GeneratorError(
                    f"{where} {what} after {self.settings.retries + 1} attempt(s): ask again "
                    "later, or raise generator_retries",
                    settings=("generator_retries",),
                )
            return wait if wait is not None else _backoff(attempt)
        raise GeneratorError(f"{where} rejected the request (HTTP {status}: {message})", kind="failed")

    def _message(self, response: httpx.Response) -> str:
        text = response.text
        try:
            data = json.loads(text)
            err = data.get("error", data) if isinstance(data, dict) else data
            text = str(err.get("message") or err) if isinstance(err, dict) else str(err)
        except ValueError:
            pass
        if self.settings.api_key:
            text = text.replace(self.settings.api_key, "***")
        return " ".join(text.split())[:300]


def _backoff(attempt: int) -> float:
    return min(8.0, 0.5 * 2.0**attempt)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds, from a number or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time()) if when else None


def _reason(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


def sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON of each `data:` line of a server-sent event stream; `[DONE]` yields {"[DONE]": True}."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            yield {"[DONE]": True}
        elif data:
            yield json.loads(data)
