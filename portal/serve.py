"""`python -m portal.serve [uvicorn options]`: the web process, uvicorn with the proxy
headers it believes taken from PORTAL_TRUSTED_PROXIES and from nowhere else.

Plain `uvicorn` believes X-Forwarded-For and X-Forwarded-Proto from 127.0.0.1 by default,
so on a host where browsers or other users' processes reach the portal over loopback, a
made-up header chose the client address the sign-in limits count (and a fresh budget with
every request). Here they are believed only from the listed proxies (addresses or
networks, comma-separated), and with none listed not at all. The Procfile, `make demo`,
the Helm chart and the tests all start the web process this way. It also installs the
portal's limits on request heads (size, time, heads in progress per address: portal.wire).

    PORTAL_TRUSTED_PROXIES=10.0.0.0/8 python -m portal.serve portal.asgi:application --port 8000
"""

from __future__ import annotations

import os
import sys

from uvicorn.main import main as uvicorn_main

_OWN = ("--proxy-headers", "--no-proxy-headers", "--forwarded-allow-ips")


def uvicorn_args(argv: list[str], trusted: str) -> list[str]:
    """uvicorn's arguments: the caller's, plus the proxy settings from `trusted`."""
    clash = [a for a in argv if a.split("=", 1)[0] in _OWN]
    if clash:
        raise SystemExit(f"portal.serve: set PORTAL_TRUSTED_PROXIES instead of {clash[0]}")
    proxies = ",".join(p.strip() for p in trusted.split(",") if p.strip())
    if not proxies:
        return ["--no-proxy-headers", *argv]
    return ["--proxy-headers", "--forwarded-allow-ips", proxies, *argv]


def protocol_args(argv: list[str]) -> list[str]:
    """uvicorn's HTTP and websocket protocols with the portal's limits on request heads
    (portal.wire), unless the caller chose others."""
    chosen = {a.split("=", 1)[0] for a in argv}
    args = []
    if "--http" not in chosen:
        args += ["--http", "portal.wire:PortalHttpProtocol"]
    if "--ws" not in chosen:
        args += ["--ws", "portal.wire:PortalWebSocketProtocol"]
    return args


def main() -> None:
    os.environ.pop("FORWARDED_ALLOW_IPS", None)  # uvicorn's own default; ours decides
    argv = [*protocol_args(sys.argv[1:]), *sys.argv[1:]]
    args = uvicorn_args(argv, os.environ.get("PORTAL_TRUSTED_PROXIES", ""))
    uvicorn_main(args=args, prog_name="portal.serve")


if __name__ == "__main__":
    main()
