"""The HTTP server of ``pcmr serve``: uvicorn (h11) with a deadline on reading each request.

uvicorn closes a kept-alive connection that stays silent after a response (``timeout_keep_alive``),
but it waits without limit for the first request of a new connection, and any byte received cancels
that timer, so a client that opens connections and sends nothing, or sends headers or a body a byte
at a time, holds them forever. :class:`ReadDeadlineProtocol` gives every request a deadline from the
moment the server starts waiting for it: when its headers and body have not all arrived within
``request_timeout_s`` the connection is closed. The time spent answering is not limited.

Needs the ``search`` extra (uvicorn).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from pcmr.search.service import ServiceLimits

__all__ = ["ReadDeadlineProtocol", "server_config"]


class ReadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline of :attr:`request_timeout_s` seconds on receiving each
    whole request (headers and body), counted from the connection's start or the previous response."""

    request_timeout_s: float = ServiceLimits.request_timeout_s
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR):
            self._cancel_deadline()  # the whole request is in: answering it has no deadline

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_deadline()  # the next request on this connection gets its own deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def _arm_deadline(self) -> None:
        self._cancel_deadline()
        self._deadline = self.loop.call_later(self.request_timeout_s, self._on_deadline)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _on_deadline(self) -> None:
        self._deadline = None
        if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR):
            return
        if not self.transport.is_closing():
            self.transport.close()


def server_config(app: Any, limits: ServiceLimits | None = None, *, trusted_proxy: str | None = None,
                  **kwargs: Any) -> uvicorn.Config:
    """A ``uvicorn.Config`` for ``app`` with :class:`ReadDeadlineProtocol` (``limits.request_timeout_s``)
    and ``limits.idle_timeout_s`` as the keep-alive timeout; ``kwargs`` go to ``uvicorn.Config``.

    The client address (the access log's) is the socket's peer: ``X-Forwarded-For`` and
    ``X-Forwarded-Proto`` are read only from the proxy address(es) ``trusted_proxy`` names (a comma-separated
    list, uvicorn's ``forwarded_allow_ips``); uvicorn by itself trusts them from 127.0.0.1, so any local
    client could write another address into the log."""
    limits = limits or ServiceLimits()
    kwargs.setdefault("proxy_headers", trusted_proxy is not None)
    if trusted_proxy is not None:
        kwargs.setdefault("forwarded_allow_ips", trusted_proxy)
    if not limits.request_timeout_s > 0 or not limits.idle_timeout_s > 0:
        raise ValueError(f"request and idle timeouts must be positive seconds, got {limits.request_timeout_s} and "
                         f"{limits.idle_timeout_s}")
    protocol = type("ReadDeadlineProtocol", (ReadDeadlineProtocol,), {"request_timeout_s": limits.request_timeout_s})
    return uvicorn.Config(app, http=protocol, timeout_keep_alive=max(1, round(limits.idle_timeout_s)), **kwargs)
