"""Static files collected once per test run, as production serves them (hashed names and a
manifest): a web process with DEBUG and the test settings off refuses to start without."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from testbed.processes import ARTIFACTS, ROOT


@functools.cache
def collected_static() -> str:
    """STATIC_ROOT for a production-like process of this run (collectstatic ran there)."""
    root = ARTIFACTS / f"staticfiles-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k not in {"PORTAL_TESTING", "DEBUG"}}
    env |= {"DEBUG": "0", "SECRET_KEY": "collectstatic-" + "s" * 40, "STATIC_ROOT": str(root)}
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    assert (Path(root) / "staticfiles.json").is_file()
    return str(root)
