"""The domain's ResourceClaimTemplate: how a workload's pods ask for the IMEX channel (DRA).

For every domain the controller creates, in the domain's namespace, the template named in
`spec.channel.resourceClaimTemplate.name` (as NVIDIA's ComputeDomain controller does): one
request `channel` for one device of the portal's DeviceClass (shipped by the Helm chart;
its driver is the node agent's, never NVIDIA's), and opaque config for that driver naming
the domain (`domainID` = the domain's uid, `allocationMode`). The node agent reads that
config from the claim in `NodePrepareResources` to know which domain a pod belongs to.

Claims made from a template carry its `spec.metadata` labels, so the claims of a domain
are found by the `portal.domains/domain-uid` label: the template is deleted when the
domain is released, but not while such claims still exist (a pod still holding one would
otherwise point at nothing); `kube.reconcile` tries again until they are gone.

`resource.k8s.io` is `v1` from Kubernetes 1.34, `v1beta1` in 1.32 and 1.33 (the device
class name sits on the request there, under `exactly` in v1); which one the server speaks
is asked once per client by API discovery.
"""

from __future__ import annotations

import json
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentwire.dra import CONFIG_API_VERSION, CONFIG_KIND, DEVICE_CLASS, DRIVER_NAME
from domains.computedomains.models import ComputeDomain
from domains.kube.client import KubeRejected, call, is_not_found

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta1")
REQUEST = "channel"
MANAGED_BY = "domain-portal"
DOMAIN_UID_LABEL = "portal.domains/domain-uid"
DOMAIN_LABEL = "portal.domains/domain"


def device_selector(domain: ComputeDomain) -> str:
    """The CEL expression that keeps the scheduler to the trays the domain's admission takes.

    Each tray's slice says which domain the tray serves (`domain`, its uid; "" free): a
    placed domain (numNodes > 0) takes only its own trays. One that follows its workload
    takes its own, or free ones that may take a new member now (`eligible`: ready, in a
    clique, no blocking condition, held by no domain, no maintenance window scheduled; a
    cordoned, draining, down or pending tray is not) in the cliques it keeps to (`clique`,
    the set fixed when it was requested: domains/computedomains/following.py). Between a
    placement and the agent's next slice update (its next fetch of the desired state,
    nudged at once) a placed domain's pods stay Pending and are
    scheduled when the slice changes; a claim allocated from a slice that was stale the
    other way is still refused by the agent's admission, with its reason. A tray a placed
    domain lost and replaced keeps the slice its dead agent last published, naming the
    domain: the portal withdraws it (`sweep.slices_withdraw`). Slices come from
    agents that publish both attributes: upgrade the agents before the portal (a missing
    attribute fails the CEL).
    """
    attributes = f'device.attributes["{DRIVER_NAME}"]'
    mine = f'{attributes}.domain == "{domain.uid}"'
    if domain.num_nodes > 0:
        return mine
    free = f'{attributes}.domain == "" && {attributes}.eligible'
    labels = sorted(c.label for c in domain.cliques.all())
    if labels:
        # A tray not yet in a clique has no `clique` attribute: its slice is not eligible.
        free += f" && {attributes}.clique in [{', '.join(json.dumps(x) for x in labels)}]"
    return f"{mine} || ({free})"


def template_object(domain: ComputeDomain, version: str) -> dict[str, Any]:
    request: dict[str, Any] = {"name": REQUEST}
    selectors = [{"cel": {"expression": device_selector(domain)}}]
    if version == "v1beta1":
        request.update(deviceClassName=DEVICE_CLASS, selectors=selectors)
    else:
        request["exactly"] = {"deviceClassName": DEVICE_CLASS, "selectors": selectors}
    labels = {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        DOMAIN_LABEL: domain.name,
        DOMAIN_UID_LABEL: str(domain.uid),
    }
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": domain.resource_claim_template,
            "namespace": domain.namespace.name,
            "labels": labels,
        },
        "spec": {
            # Copied into every claim made from it: how the claims of a domain are found.
            "metadata": {"labels": {DOMAIN_UID_LABEL: str(domain.uid)}},
            "spec": {
                "devices": {
                    "requests": [request],
                    "config": [
                        {
                            "requests": [REQUEST],
                            "opaque": {
                                "driver": DRIVER_NAME,
                                "parameters": {
                                    "apiVersion": CONFIG_API_VERSION,
                                    "kind": CONFIG_KIND,
                                    "domainID": str(domain.uid),
                                    "allocationMode": domain.allocation_mode,
                                },
                            },
                        }
                    ],
                }
            },
        },
    }


class ClaimTemplates:
    """The template calls the publisher makes, in the version the API server speaks."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self._version = ""

    @property
    def version(self) -> str:
        if not self._version:
            try:
                group = call(client.ResourceApi(self.api).get_api_group)
            except ApiException as exc:
                if not is_not_found(exc):
                    raise
                group = None
            served = {v.version for v in (group.versions if group else None) or []}
            found = [v for v in VERSIONS if v in served]
            if not found:
                raise KubeRejected(
                    404,
                    f"the API server serves no {GROUP} version the portal speaks "
                    f"({', '.join(VERSIONS)}): DRA needs Kubernetes 1.32 or later",
                )
            self._version = found[0]
        return self._version

    def _get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], call(
                self.custom.get_namespaced_custom_object,
                GROUP, self.version, namespace, plural, name,
            ))  # fmt: skip
        except ApiException as exc:
            if is_not_found(exc):
                return None
            raise

    def ensure(self, domain: ComputeDomain) -> str:
        """Create the template, or say why not; returns what was done."""
        ns, name = domain.namespace.name, domain.resource_claim_template
        wanted = template_object(domain, self.version)
        current = self._get("resourceclaimtemplates", ns, name)
        if current is None:
            try:
                call(
                    self.custom.create_namespaced_custom_object,
                    GROUP, self.version, ns, "resourceclaimtemplates", wanted,
                )  # fmt: skip
            except ApiException as exc:
                if is_not_found(exc):
                    raise KubeRejected(404, f"namespace {ns} does not exist in the cluster")
                raise
            return "template created"
        labels = current["metadata"].get("labels") or {}
        if labels.get(DOMAIN_UID_LABEL) != str(domain.uid):
            raise KubeRejected(
                409,
                f"ResourceClaimTemplate {ns}/{name} exists and is not this domain's: rename "
                "spec.channel.resourceClaimTemplate.name or delete that template",
            )
        return "template unchanged"  # the spec is immutable, like the domain's

    def claims_of(self, domain: ComputeDomain) -> list[str]:
        """Names of the ResourceClaims made from the domain's template that still exist."""
        answer = cast(dict[str, Any], call(
            self.custom.list_namespaced_custom_object,
            GROUP, self.version, domain.namespace.name, "resourceclaims",
            label_selector=f"{DOMAIN_UID_LABEL}={domain.uid}",
        ))  # fmt: skip
        return [item["metadata"]["name"] for item in answer.get("items", [])]

    def remove(self, domain: ComputeDomain) -> str:
        """Delete the domain's template once no claim made from it is left."""
        ns, name = domain.namespace.name, domain.resource_claim_template
        current = self._get("resourceclaimtemplates", ns, name)
        labels = (current or {}).get("metadata", {}).get("labels") or {}
        if current is None or labels.get(DOMAIN_UID_LABEL) != str(domain.uid):
            return "no template"
        claims = self.claims_of(domain)
        if claims:
            return f"waiting: ResourceClaims {', '.join(sorted(claims)[:5])} still exist"
        try:
            call(
                self.custom.delete_namespaced_custom_object,
                GROUP, self.version, ns, "resourceclaimtemplates", name,
                body={"preconditions": {"uid": current["metadata"]["uid"]}},
            )  # fmt: skip
        except ApiException as exc:
            if not is_not_found(exc):
                raise
        return "template removed"
