# SPDX-License-Identifier: Apache-2.0
"""`nvidia-imex-ctl -u SOCKET`: the same one-line request as over TCP, on a unix socket.

Run by `bin/nvidia-imex-ctl` (bash has no unix sockets): `unixctl.py SOCKET MODE REQUEST`.
"""

import _socket
import os
import sys
import time


def ask(path: str, request: str) -> bytes | None:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        return None
    sock.sendall(request.encode() + b"\n")
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks)


def main(path: str, mode: str, request: str) -> int:
    while True:
        reply = ask(path, request)
        if reply is None:
            if mode == "-q":
                print("UNAVAILABLE", flush=True)
            print(f"nvidia-imex-ctl: cannot connect to the IMEX daemon at {path}", file=sys.stderr)
            return 1
        os.write(1, reply)
        if mode != "-n":
            return 0
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
