"""Examples in the OpenAPI schema for the ComputeDomain operations: one domain, `llm-pretrain`
in `team-a` on two trays of rack gb-r01, seen at each step of its life, as the API answers."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample

UID = "5f0c7a9e-3b1d-4e8a-9c2f-6d4b1a7e8c30"
CLIQUE = "bcce32a0-a5bb-5784-ac79-b7fb5fbfab39.0"
CREATED = "2026-11-27T09:00:00Z"
PLACED = "2026-11-27T09:00:04Z"
READY_AT = "2026-11-27T09:00:41Z"
LEASE_END = "2026-11-28T09:00:00Z"

CREATE_BODY = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "llm-pretrain", "labels": {"team": "nlp"}},
    "spec": {
        "numNodes": 2,
        "channel": {
            "resourceClaimTemplate": {"name": "llm-pretrain-channel"},
            "allocationMode": "Single",
        },
        "placement": {"constraint": "rack", "target": "gb-r01"},
        "lifetime": "24h",
    },
}
NVIDIA_BODY = {  # the first document of NVIDIA's channel-injection example, as JSON
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "imex-channel-injection"},
    "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}}},
}


def _condition(kind: str, true: bool, when: str, reason: str, message: str = "") -> dict[str, Any]:
    status = "True" if true else "False"
    return {
        "type": kind,
        "status": status,
        "lastTransitionTime": when,
        "reason": reason,
        "message": message,
    }


def _member(index: int, state: str, when: str) -> dict[str, Any]:
    return {
        "name": f"gb-r01-t0{index + 1}",
        "ipAddress": f"10.1.1.{index + 1}",
        "cliqueID": CLIQUE,
        "cliqueName": "gb-r01-c0",
        "index": index,
        "status": "Ready" if state == "ready" else "NotReady",
        "state": state,
        "step": "",
        "message": "",
        "stateChangedAt": when,
    }


def domain(
    phase: str,
    *,
    reason: str = "",
    message: str = "",
    approval: str = "not_required",
    members: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    lease: str | None = LEASE_END,
    generation: int = 3,
) -> dict[str, Any]:
    """The example domain in a phase; `members` is its trays' state (none: not placed)."""
    trays = [_member(i, members, READY_AT) for i in range(2)] if members else []
    ready = 2 if members == "ready" else 0
    clique = {"cliqueID": CLIQUE, "cliqueName": "gb-r01-c0", "rack": "gb-r01"}
    cliques = [{**clique, "members": 2, "ready": ready, "channel": 7}]
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": "llm-pretrain",
            "namespace": "team-a",
            "uid": UID,
            "creationTimestamp": CREATED,
            "generation": generation,
            "labels": {"team": "nlp"},
        },
        "spec": {
            "numNodes": 2,
            "gpusPerNode": 4,
            "channel": {
                "resourceClaimTemplate": {"name": "llm-pretrain-channel"},
                "allocationMode": "Single",
            },
            "placement": {"constraint": "rack", "target": "gb-r01"},
            "lifetime": "24h",
            "replace": "auto",
            "spanCliques": 0,
            "spanRacks": 0,
        },
        "status": {
            "status": "Ready" if phase == "Ready" else "NotReady",
            "phase": phase,
            "reason": reason,
            "message": message,
            "approval": approval,
            "leaseExpiresAt": lease,
            "estimatedPlacementAt": None,
            "estimateReason": "",
            "estimateMessage": "",
            "conditions": conditions or [],
            "nodes": trays,
            "cliques": cliques if members else [],
        },
    }


READY = domain(
    "Ready",
    members="ready",
    conditions=[
        _condition("Admitted", True, CREATED, "Admitted"),
        _condition("Placed", True, PLACED, "Placed"),
        _condition("Ready", True, READY_AT, "AllMembersReady"),
    ],
)
ADMITTED = domain(
    "Admitted",
    reason="Queued",
    message="admitted; waiting for placement",
    lease=None,
    generation=1,
    conditions=[
        _condition("Admitted", True, CREATED, "Admitted"),
        _condition("Placed", False, CREATED, "Queued"),
        _condition("Ready", False, CREATED, "Queued", "admitted; waiting for placement"),
    ],
)
RELEASING_MESSAGE = (
    "release requested by alice: released via API; waiting for every agent to confirm a clean tray"
)
RELEASING = domain(
    "Releasing",
    reason="Releasing",
    message=RELEASING_MESSAGE,
    members="releasing",
    generation=4,
    conditions=[
        _condition("Admitted", True, CREATED, "Admitted"),
        _condition("Placed", True, PLACED, "Placed"),
        _condition("Ready", False, "2026-11-27T15:12:09Z", "Releasing", RELEASING_MESSAGE),
    ],
)
EXTENDED = {**READY, "status": {**READY["status"], "leaseExpiresAt": "2026-11-28T13:00:00Z"}}
_REPLACED = "gb-r01-t02 replaced by gb-r01-t11 (tray gb-r01-t02 is down: PSU); forming it in"
REPLACED = {
    **READY,
    "status": {
        **READY["status"],
        "status": "NotReady",
        "phase": "Degraded",
        "reason": "Replacing",
        "message": _REPLACED,
    },
}
WAITING_MESSAGE = "2 trays is above the approval threshold; waiting for an admin"
WAITING = domain(
    "Pending",
    reason="AwaitingApproval",
    message=WAITING_MESSAGE,
    approval="pending",
    lease=None,
    generation=1,
    conditions=[
        _condition("Admitted", False, CREATED, "WaitingForApproval"),
        _condition("Placed", False, CREATED, "Queued"),
        _condition("Ready", False, CREATED, "AwaitingApproval", WAITING_MESSAGE),
    ],
)
_APPROVED_MESSAGE = "approved by admin; waiting for placement"
APPROVED = domain(
    "Admitted",
    reason="Queued",
    message=_APPROVED_MESSAGE,
    approval="approved",
    lease=None,
    generation=2,
    conditions=[
        _condition("Admitted", True, "2026-11-27T09:20:00Z", "Admitted"),
        _condition("Placed", False, CREATED, "Queued"),
        _condition("Ready", False, "2026-11-27T09:20:00Z", "Queued", _APPROVED_MESSAGE),
    ],
)
DENIED_MESSAGE = "denied by admin: no room before the maintenance on Monday"
DENIED = domain(
    "Failed",
    reason="Denied",
    message=DENIED_MESSAGE,
    approval="denied",
    lease=None,
    generation=2,
    conditions=[
        _condition("Admitted", False, CREATED, "Denied"),
        _condition("Placed", False, CREATED, "Queued"),
        _condition("Ready", False, "2026-11-27T09:20:00Z", "Denied", DENIED_MESSAGE),
        _condition("Failed", True, "2026-11-27T09:20:00Z", "Denied", DENIED_MESSAGE),
    ],
)

_QUOTA_IMPACT = {
    "gpus": {"used": 20, "requested": 8, "limit": 48},
    "nodes": {"used": 5, "requested": 2, "limit": 12},
    "domains": {"used": 3, "requested": 1, "limit": 4},
}
_FITS = "would be placed on 2 trays in rack gb-r01 clique gb-r01-c0 (16 free before)"
DRY_RUN_FITS = {
    "dryRun": "All",
    "placeable": True,
    "quotaOk": True,
    "needsApproval": False,
    "message": _FITS,
    "reasons": [],
    "quotaProblems": [],
    "placement": {
        "clique": CLIQUE,
        "cliqueName": "gb-r01-c0",
        "rack": "gb-r01",
        "nodes": ["gb-r01-t03", "gb-r01-t04"],
    },
    "quotaImpact": _QUOTA_IMPACT,
    "maintenance": [],
    "estimatedPlacementAt": None,
    "estimateReason": "",
    "estimateMessage": "",
    "mixedDrivers": [],
}
_FULL = "needs 2 free trays in one clique; best is rack gb-r01 clique gb-r01-c0 with 1 free"
DRY_RUN_WAITS = {
    **DRY_RUN_FITS,
    "placeable": False,
    "message": _FULL,
    "reasons": [_FULL, "gb-r01-c0: 1 free, 17 in use"],
    "placement": None,
    "estimatedPlacementAt": "2026-11-27T21:30:00Z",
    "estimateReason": "Estimated",
    "estimateMessage": "",
}

_EVENT_OBJECT = {"type": "computedomain", "id": UID, "repr": "team-a/llm-pretrain"}
EVENT = {
    "id": 4182,
    "time": READY_AT,
    "actor": {"kind": "controller", "name": "controller"},
    "verb": "domain.ready",
    "object": _EVENT_OBJECT,
    "namespace": "team-a",
    "domain": "llm-pretrain",
    "domainUid": UID,
    "node": None,
    "requestId": "",
    "message": "every member reports its IMEX daemon ready",
    "details": {},
}

_POD = (
    "      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuring"
    "Execution:\n            nodeSelectorTerms:\n            - matchExpressions:\n"
    "              - key: nvidia.com/gpu.clique\n                operator: In\n"
    f"                values:\n                - {CLIQUE}\n"
    "      containers:\n      - name: ctr\n        image: ubuntu:22.04\n"
    "        resources:\n          claims:\n          - name: compute-domain-channel\n"
    "      resourceClaims:\n      - name: compute-domain-channel\n"
    "        resourceClaimTemplateName: llm-pretrain-channel\n"
)
MANIFESTS = {
    "deployment": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: llm-pretrain\n"
    "  namespace: team-a\nspec:\n  replicas: 2\n  template:\n    spec:\n" + _POD,
    "job": "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: llm-pretrain\n"
    "  namespace: team-a\nspec:\n  completions: 2\n  parallelism: 2\n  template:\n"
    "    spec:\n" + _POD,
    "mpijob": "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata:\n"
    "  name: llm-pretrain\n  namespace: team-a\nspec:\n  mpiReplicaSpecs:\n    Worker:\n"
    "      replicas: 2\n",
}


def answer(key: str, summary: str, value: Any, status: int = 200) -> OpenApiExample:
    return OpenApiExample(
        key, value=value, summary=summary, response_only=True, status_codes=[status]
    )


def body(key: str, summary: str, value: Any) -> OpenApiExample:
    return OpenApiExample(key, value=value, summary=summary, request_only=True)


LIST = [answer("ready", "A Ready domain", READY)]
RETRIEVE = [answer("ready", "Ready on two trays", READY)]
CREATE = [
    body("pinned", "Two trays in rack gb-r01 for 24 h", CREATE_BODY),
    body("nvidia", "NVIDIA's own manifest, as JSON", NVIDIA_BODY),
    answer("admitted", "Admitted, waiting for placement", ADMITTED, 201),
    answer("fits", "With ?dryRun=All: where it would land", DRY_RUN_FITS),
    answer("waits", "With ?dryRun=All: why not now, and when", DRY_RUN_WAITS),
]
RELEASE = [answer("releasing", "Releasing: its trays are being cleaned", RELEASING, 202)]
EXTEND = [
    body("hours", "Four more hours", {"by": "4h"}),
    answer("extended", "The lease ends four hours later", EXTENDED),
]
REPLACE = [
    body("pick", "An operator picks the tray", {"tray": "gb-r01-t02", "with": "gb-r01-t11"}),
    answer("replaced", "The new tray forms in", REPLACED),
]
MANIFESTS_EXAMPLES = [answer("manifests", "Pinned to its trays (abridged)", MANIFESTS)]
EVENTS = [answer("ready", "It became Ready", EVENT)]
APPROVALS = [answer("waiting", "Waiting for approval", WAITING)]
APPROVE = [answer("approved", "Approved, queued for placement", APPROVED)]
DENY = [
    body("reason", "With a reason", {"reason": "no room before the maintenance on Monday"}),
    answer("denied", "Denied: it ends Failed", DENIED),
]
