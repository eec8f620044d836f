# SPDX-License-Identifier: Apache-2.0
"""The agent's log: every line names the tray and the request id of the domain it works for."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

logger = logging.getLogger("nodeagent")


class TrayLog(logging.LoggerAdapter[logging.Logger]):
    """Every line names the tray and the request id of the domain it is working for."""

    def __init__(self, tray: str) -> None:
        super().__init__(logger, {})
        self.tray = tray
        self.request_id = ""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        return f"{self.tray} [{self.request_id or '-'}] {msg}", kwargs
