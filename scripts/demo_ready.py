"""`make demo`'s wait for its own web server (scripts/demo.sh prints the address after it).

Exits 0 once URL answers an HTTP request (whatever its status: the server is up), 1 when the
process manager that runs the server (--pid) is gone first or after --timeout seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import httpx


def answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=2)
    except httpx.HTTPError:
        return False
    return True


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo_ready.py")
    parser.add_argument("url", help="e.g. http://127.0.0.1:8000/healthz")
    parser.add_argument("--pid", type=int, required=True, help="stop waiting once it is gone")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and alive(args.pid):
        if answers(args.url):
            return 0
        time.sleep(0.25)
    return 1


if __name__ == "__main__":
    sys.exit(main())
