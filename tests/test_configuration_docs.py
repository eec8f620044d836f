"""docs/configuration.md names every environment variable the portal and its demo read:
the settings, the web, workers and beat, `make demo` (scripts/demo.sh, Procfile, seed_demo),
the private services and the emulated fleet. The variables are found in the code itself."""

from __future__ import annotations

import re
from pathlib import Path

from testbed.processes import ROOT

DOCUMENTED = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
PYTHON_READS = re.compile(
    r"(?:environ(?:\.get)?[\[(]|getenv\(|env_(?:bool|int|list)\()\s*\"(?P<name>[A-Z][A-Z0-9_]+)\""
    r"|\b[A-Z_]*ENV\s*=\s*\"(?P<constant>[A-Z][A-Z0-9_]+)\""  # seed_demo's IP_PREFIX_ENV
)
SHELL_READS = re.compile(r"\$\{?(?P<name>[A-Z][A-Z0-9_]+)")
# What a shell or the code sets for itself, rather than reads from whoever runs it.
NOT_SETTINGS = {"PWD"}


def demo_sources() -> list[Path]:
    python = [
        *(ROOT / "portal").rglob("*.py"),
        *(ROOT / "domains").rglob("*.py"),
        *(ROOT / "testbed" / "emulator").rglob("*.py"),
        ROOT / "testbed" / "devservices.py",
        ROOT / "testbed" / "fleetspec.py",
    ]
    return [p for p in python if "migrations" not in p.parts]


def read_variables() -> dict[str, str]:
    """Every variable read, with the first file that reads it."""
    found: dict[str, str] = {}
    for source in demo_sources():
        for match in PYTHON_READS.finditer(source.read_text(encoding="utf-8")):
            found.setdefault(match["name"] or match["constant"], str(source.relative_to(ROOT)))
    for source in (ROOT / "scripts" / "demo.sh", ROOT / "Procfile"):
        for match in SHELL_READS.finditer(source.read_text(encoding="utf-8")):
            found.setdefault(match["name"], str(source.relative_to(ROOT)))
    return {name: where for name, where in found.items() if name not in NOT_SETTINGS}


def test_configuration_md_names_every_variable_the_portal_and_its_demo_read() -> None:
    variables = read_variables()
    assert {"DATABASE_URL", "PORTAL_DEMO_IP_PREFIX", "SEED_ARGS", "IMEX_EMU_HOSTS"} <= set(
        variables
    )  # the scan finds them where they are read
    missing = {name: where for name, where in variables.items() if f"`{name}`" not in DOCUMENTED}
    assert missing == {}, f"read but not in docs/configuration.md: {missing}"
