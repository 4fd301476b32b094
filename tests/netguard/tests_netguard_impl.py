"""Socket guard: connect() to anything but loopback (or a Unix socket) raises."""

from __future__ import annotations

import ipaddress
import socket

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


class NonLoopbackConnection(RuntimeError):
    pass


def _check(address: object) -> None:
    if not isinstance(address, tuple):
        return  # AF_UNIX paths are local by nature
    host = str(address[0])
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        if host == "localhost":
            return
        raise NonLoopbackConnection(f"test tried to connect to {host!r}: only loopback is allowed") from None
    if not ip.is_loopback:
        raise NonLoopbackConnection(f"test tried to connect to {host}: only loopback is allowed")


def _connect(self: socket.socket, address: object) -> None:
    _check(address)
    return _real_connect(self, address)


def _connect_ex(self: socket.socket, address: object) -> int:
    _check(address)
    return _real_connect_ex(self, address)


def install() -> None:
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]


install()
