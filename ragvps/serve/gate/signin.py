"""Sign-in with the team's identity provider (OpenID Connect, authorization code + PKCE) for the page:

GET  /auth/login?next=/   -> the provider's sign-in page (state, nonce and PKCE verifier in a 10-minute cookie)
GET  /auth/callback       <- the provider sends the user back: the code is exchanged, the ID token checked,
                             the session cookie set, the user remembered (their groups, for forwarded look-ups)
GET|POST /auth/logout     -> the session cookie cleared, then the provider's end-session page if it has one
GET  /auth/me             who the page is signed in as (open: the page asks before it has any credentials)
"""

# No `from __future__ import annotations` here: FastAPI reads the routes' parameters from the annotations.
import contextlib
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from ragvps.errors import RagvpsError, UnauthorizedError
from ragvps.serve.gate.oidc import Login
from ragvps.serve.gate.session import LOGIN_COOKIE, SESSION_COOKIE, cookie, cookie_header, session_payload
from ragvps.serve.shared.threads import in_thread

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ragvps.config import Settings
    from ragvps.serve.gate.oidc import Provider
    from ragvps.serve.gate.people import People
    from ragvps.serve.shared.lifecycle import Ready

OPEN_AUTH_PATHS = frozenset({"/auth/login", "/auth/callback", "/auth/logout", "/auth/me"})
LOGIN_MAX_AGE_S = 600


def add_signin_routes(api: "FastAPI", settings: "Settings", ready: "Ready", people: "People | None") -> None:
    provider = people.provider if people is not None else None

    @api.get("/auth/me", tags=["auth"], summary="Who the page is signed in as, and whether sign-in is offered")
    async def me(request: Request) -> JSONResponse:
        principal = await people.from_session(list(request.scope["headers"])) if people is not None else None
        body: dict[str, object] = {"sign_in": provider is not None, "signed_in": principal is not None}
        if principal is not None:
            body |= {"user": principal.user, "name": principal.name, "holds_nothing": principal.holds_nothing}
        return JSONResponse(body, headers={"cache-control": "no-store"})

    if provider is not None and people is not None:
        _flow(api, settings, ready, provider, people)


def _flow(api: "FastAPI", settings: "Settings", ready: "Ready", provider: "Provider", people: "People") -> None:
    """/auth/login, /auth/callback and /auth/logout: the authorization-code flow with PKCE, and signing out (the
    session revoked, not only its cookie cleared: a copy of the cookie is refused too)."""
    hours = settings.auth.session_hours

    @api.get("/auth/login", tags=["auth"], summary="Sign in with the identity provider (redirects)")
    async def login(request: Request, next: str = "/") -> Response:
        attempt = Login.new(next if next.startswith("/") and not next.startswith("//") else "/")
        url = await provider.authorize_url(attempt, _callback(request, settings))
        response = RedirectResponse(url, status_code=302)
        value = (await people.signer()).dump(attempt.__dict__, LOGIN_MAX_AGE_S)
        secure = _https(request, settings)
        response.raw_headers.append(cookie_header(LOGIN_COOKIE, value, LOGIN_MAX_AGE_S, secure, "/auth"))
        return response

    @api.get("/auth/callback", tags=["auth"], summary="Where the identity provider sends the user back")
    async def callback(request: Request, code: str = "", state: str = "", error: str = "") -> Response:
        signer = await people.signer()
        attempt = _login_of(signer.load(cookie(list(request.scope["headers"]), LOGIN_COOKIE) or ""))
        if error or attempt is None or not code or state != attempt.state:
            why = (
                f"the provider said {error!r}"
                if error
                else "the sign-in expired or did not start here"
                if attempt is None
                else "the sign-in's state does not match"
            )
            raise UnauthorizedError(f"sign-in failed ({why}): start again at /auth/login")
        token = await provider.exchange(code, attempt, _callback(request, settings))
        claims = await provider.verify(token, (settings.auth.oidc_client_id,), nonce=attempt.nonce)
        user = claims.user()
        library = ready.library
        if library is not None:
            await in_thread(lambda: library.identities().seen(user), 5.0)
        response = RedirectResponse(attempt.next, status_code=302)
        secure = _https(request, settings)
        response.raw_headers.append(
            cookie_header(SESSION_COOKIE, signer.dump(session_payload(user), hours * 3600), hours * 3600, secure)
        )
        response.raw_headers.append(cookie_header(LOGIN_COOKIE, "", 0, secure, "/auth"))
        return response

    _logout(api, settings, provider, people)


def _logout(api: "FastAPI", settings: "Settings", provider: "Provider", people: "People") -> None:
    # a link (GET) as well as POST: the page's form-action 'self' would stop a form's redirect to the provider
    @api.api_route(
        "/auth/logout",
        methods=["GET", "POST"],
        tags=["auth"],
        summary="Sign out (and out of the provider, where it offers that)",
    )
    async def logout(request: Request) -> Response:
        # the database away: the cookie is still cleared, and the session ends at its expiry
        with contextlib.suppress(RagvpsError):
            await people.sign_out(list(request.scope["headers"]))
        home = str(request.base_url)
        try:
            after = await provider.logout_url(home)
        except RagvpsError:
            after = None
        response = RedirectResponse(after or "/", status_code=303)
        response.raw_headers.append(cookie_header(SESSION_COOKIE, "", 0, _https(request, settings)))
        return response


def _login_of(payload: dict[str, object] | None) -> Login | None:
    if payload is None:
        return None
    try:
        return Login(str(payload["state"]), str(payload["nonce"]), str(payload["verifier"]), str(payload["next"]))
    except KeyError:
        return None


def _callback(request: "Request", settings: "Settings") -> str:
    """Where the provider sends the user back: the setting oidc_redirect_url behind a proxy, else this server."""
    return settings.auth.oidc_redirect_url or str(request.url_for("callback"))


def _https(request: "Request", settings: "Settings") -> bool:
    """Secure cookies when the page is https: served so, or behind a proxy whose public callback URL is."""
    return request.url.scheme == "https" or settings.auth.oidc_redirect_url.startswith("https://")
