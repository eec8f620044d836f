#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The size limits on app code: no module over 450 lines, no function over 60 lines.

    python scripts/check_limits.py        # prints each breach, exits 1 if there is one

App code is domains/, portal/, nodeagent/, agentwire/ and the IMEX emulator
(testbed/emulator/), less migrations and the generated gRPC modules. A function's length
runs from its `def` (decorators left out) to its last line, docstring included. Complexity
(ruff's C901) is checked by ruff itself.
Standard library only, so it runs anywhere the tree does.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("domains", "portal", "nodeagent", "agentwire", "testbed/emulator")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
# Modules still being split, each with its reason; a breach in any other module fails.
PENDING: dict[str, str] = {}


def app_modules(root: Path = ROOT) -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts or path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            yield path


def breaches(root: Path = ROOT) -> list[str]:
    """Every module over MAX_MODULE_LINES and function over MAX_FUNCTION_LINES, as text."""
    found = []
    for path in app_modules(root):
        name = path.relative_to(root).as_posix()
        if name in PENDING:
            continue
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(
                        f"{name}:{node.lineno} {node.name}: {length} lines "
                        f"(at most {MAX_FUNCTION_LINES})"
                    )
    return found


def main() -> int:
    found = breaches()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
