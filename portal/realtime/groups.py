"""Names of the Channels groups that live updates travel through."""

from __future__ import annotations


def domain_group(domain_uid: str) -> str:
    return f"domain.{domain_uid}"


def namespace_group(namespace_id: int) -> str:
    return f"namespace.{namespace_id}"


def fabric_group() -> str:
    """Operators' fabric view: every tray and domain change."""
    return "fabric"


def agent_group(node_id: int) -> str:
    """One tray's agent: told only that its desired state changed."""
    return f"agent.{node_id}"
