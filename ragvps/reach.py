"""Where a connected source may connect (docs/security.md, "Sources"): public addresses, and beyond them only the
hosts and networks the server's own configuration allows (`source_allow_hosts`), never a knowledge base's admin.

The check is of the address connected to, not of a URL's host name: `Reach.address` resolves a host once, keeps
the first address that passes, and the caller connects to that very address (`transport` for httpx: a network
backend that dials the checked IP while TLS still checks the host name; git is pinned to it with curl's resolve
list). A name that resolves to loopback, to a private network or to a cloud's metadata address, a redirect to one,
or a name whose address changes between a check and the connection (DNS rebinding) reaches nothing.
"""

from __future__ import annotations

import ipaddress
import socket
import typing
from dataclasses import dataclass

import anyio.to_thread
import httpcore
import httpx

from ragvps.errors import Blocked

__all__ = ["Blocked", "Reach", "async_client", "client", "public"]
SETTING = "source_allow_hosts"
READ_S = 10.0  # the longest wait for a response's next bytes: a cancel lands within it
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _plain(ip: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, NAT64), else the address itself."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def public(ip: Address) -> bool:
    """An address on the public internet: not loopback, link-local (the metadata services), private, shared,
    multicast, reserved or unspecified."""
    ip = _plain(ip)
    return ip.is_global and not ip.is_multicast


@dataclass(frozen=True)
class Reach:
    """The server's allow-list: host names (as a URL spells them) and networks beyond the public internet."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @staticmethod
    def of(entries: typing.Iterable[str]) -> Reach:
        hosts: set[str] = set()
        networks: list[Network] = []
        for entry in (e.strip().lower().strip("[]") for e in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.rstrip("."))
        return Reach(frozenset(hosts), tuple(networks))

    def allows(self, host: str, ip: Address) -> bool:
        if public(ip) or host.lower().rstrip(".").strip("[]") in self.hosts:
            return True
        return any(_plain(ip) in n or ip in n for n in self.networks)

    def address(self, host: str, port: int) -> str:
        """The address to connect to for `host`: the first it resolves to that this reach allows, or Blocked."""
        return self.addresses(host, port)[0]

    def addresses(self, host: str, port: int) -> list[str]:
        """Every address `host` resolves to that this reach allows, in the resolver's order; Blocked for none."""
        bare = host.strip("[]")
        try:
            found = [ipaddress.ip_address(bare)]
        except ValueError:
            try:
                infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError) as exc:
                raise Blocked(f"{host} does not resolve ({exc})") from None
            found = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        allowed = [str(ip) for ip in found if self.allows(bare, ip)]
        if allowed:
            return list(dict.fromkeys(allowed))
        shown = found[0] if found else "no address"
        raise Blocked(
            f"{host} is at {shown}, not a public address: a source reaches it only when the server's "
            f"configuration lists it in {SETTING}"
        )


class _Backend(httpcore.NetworkBackend):
    """httpcore's own sockets, dialled to the address Reach checked (resolved once: no second lookup)."""

    def __init__(self, reach: Reach):
        self.reach = reach
        self.inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        *others, last = self.reach.addresses(host, port)
        for address in others:  # each checked address in turn (localhost: ::1, then 127.0.0.1)
            try:
                return self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError:
                continue
        return self.inner.connect_tcp(last, port, timeout, local_address, socket_options)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise Blocked(f"{path}: a source never connects to a socket file")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    """The same, for asyncio (the address is resolved in a thread: getaddrinfo blocks)."""

    def __init__(self, reach: Reach):
        self.reach = reach
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        *others, last = await anyio.to_thread.run_sync(self.reach.addresses, host, port)
        for address in others:
            try:
                return await self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError:
                continue
        return await self.inner.connect_tcp(last, port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise Blocked(f"{path}: never a socket file")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _AsyncTransport(httpx.AsyncHTTPTransport):
    def __init__(self, reach: Reach):
        super().__init__(trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(), network_backend=_AsyncBackend(reach)
        )


def async_client(reach: Reach, timeout: float, auth: httpx.Auth | None = None) -> httpx.AsyncClient:
    """An asyncio httpx client under `reach` (the identity provider's endpoints): no proxy, no redirects."""
    return httpx.AsyncClient(
        timeout=timeout, follow_redirects=False, trust_env=False, transport=_AsyncTransport(reach), auth=auth
    )


class _Transport(httpx.HTTPTransport):
    def __init__(self, reach: Reach):
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), network_backend=_Backend(reach))


def client(reach: Reach, timeout: float) -> httpx.Client:
    """An httpx client whose every connection (redirects included) is checked by `reach`; no proxy from the
    environment (a proxy would resolve the name itself), no redirects followed by httpx."""
    limits = httpx.Timeout(timeout, read=min(timeout, READ_S))
    return httpx.Client(timeout=limits, follow_redirects=False, trust_env=False, transport=_Transport(reach))
