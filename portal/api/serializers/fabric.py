"""Racks, cliques and trays. Every signed-in user reads the fabric; tenants see other
tenants' trays only as "in use", never which domain holds them (as in the UI)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from domains.computedomains.traytruth import (
    STATUS_WORDS,
    TrayTruth,
    in_foreign_clique,
    node_truth,
    tray_truth,
)
from domains.inventory.models import Clique, Node, NodeState, Rack


class TrayCountsSerializer(serializers.Serializer):
    total = serializers.IntegerField(source="trays_total", help_text="Compute trays in all.")
    ready = serializers.IntegerField(
        source="trays_ready", help_text="Trays in state `ready` (placeable if free)."
    )
    inUse = serializers.IntegerField(source="trays_in_use", help_text="Trays a domain holds.")


class RackSerializer(serializers.ModelSerializer):
    computeSlots = serializers.IntegerField(
        source="compute_slots", help_text="Compute tray slots (18 in a GB200 NVL72)."
    )
    switchSlots = serializers.IntegerField(
        source="switch_slots", help_text="NVLink switch tray slots (9 in a GB200 NVL72)."
    )
    cliques = serializers.SerializerMethodField(
        help_text="The `nvidia.com/gpu.clique` labels of its NVLink partitions."
    )
    trays = TrayCountsSerializer(source="*", help_text="Its compute trays, counted.")

    class Meta:
        model = Rack
        fields = ["name", "location", "kind", "position", "computeSlots", "switchSlots"]
        fields += ["cliques", "trays"]
        extra_kwargs = {
            "name": {"help_text": "Its name, unique in the fleet."},
            "location": {"help_text": "Where it stands (row, hall); may be empty."},
            "kind": {"help_text": "Its model, e.g. `gb200-nvl72`."},
        }

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_cliques(self, rack: Rack) -> list[str]:
        """The `nvidia.com/gpu.clique` labels of the rack's NVLink partitions."""
        return [clique.label for clique in rack.cliques.all()]


class CliqueSerializer(serializers.ModelSerializer):
    # A field named like DRF's own Field.label attribute, which the stubs type as text.
    label = serializers.CharField(help_text="The nvidia.com/gpu.clique label value.")  # type: ignore[assignment]
    clusterUuid = serializers.CharField(
        source="cluster_uuid", help_text="The NVLink fabric's cluster UUID (label's first part)."
    )
    cliqueId = serializers.IntegerField(
        source="clique_id", help_text="The partition's id in that fabric (label's last part)."
    )
    rack = serializers.CharField(
        source="rack.name", allow_null=True, default=None, help_text="Its rack's name."
    )
    trays = TrayCountsSerializer(source="*", help_text="Its compute trays, counted.")

    class Meta:
        model = Clique
        fields = ["label", "name", "clusterUuid", "cliqueId", "rack", "trays"]


class NodeDomainSerializer(serializers.Serializer):
    """The domain holding a tray, shown only to those who may see that namespace."""

    namespace = serializers.CharField(help_text="The domain's namespace.")
    name = serializers.CharField(help_text="The domain's name.")
    uid = serializers.UUIDField(help_text="The domain's uid.")
    index = serializers.IntegerField(help_text="The tray's place in the domain, from 0.")


class NodeConditionSerializer(serializers.Serializer):
    """Something the tray's agent found that an operator must fix."""

    type = serializers.CharField(help_text="What is wrong, one CamelCase word.")
    blocking = serializers.BooleanField(help_text="A blocking condition keeps it unplaceable.")
    message = serializers.CharField(help_text="What is wrong and what to do, in words.")
    since = serializers.DateTimeField(help_text="When the agent first reported it.")


class IdentityChangeSerializer(serializers.Serializer):
    """An identity change a tray reported, waiting for an operator (schema only)."""

    changes = serializers.DictField(
        child=serializers.DictField(),
        help_text="Per field (`ip`, `clique`, `gpus`, `rack`): `{from, to}`.",
    )
    by = serializers.CharField(help_text="Who reported it: the tray's agent, or kubernetes.")
    since = serializers.DateTimeField(help_text="When it was first reported.")


class NodeSerializer(serializers.ModelSerializer):
    managementIp = serializers.SerializerMethodField(
        help_text="Operators only (null for others): the tray's address."
    )
    rack = serializers.CharField(
        source="rack.name", allow_null=True, default=None, help_text="Its rack; null: none yet."
    )
    clique = serializers.CharField(
        source="clique.label",
        allow_null=True,
        default=None,
        help_text="Its `nvidia.com/gpu.clique` label; null: no multi-node NVLink.",
    )
    cliqueName = serializers.CharField(
        source="clique.name",
        allow_null=True,
        default=None,
        help_text="The operator's short name of the clique (the web UI's), beside its label.",
    )
    gpuCount = serializers.IntegerField(source="gpu_count", help_text="Its GPUs.")
    gpuProduct = serializers.CharField(source="gpu_product", help_text="e.g. NVIDIA GB200.")
    driverVersion = serializers.CharField(
        source="driver_version", help_text="Operators only (empty for others)."
    )
    imexVersion = serializers.CharField(
        source="imex_version", help_text="Operators only (empty for others)."
    )
    state = serializers.ChoiceField(
        choices=NodeState.choices, help_text="`ready` (placeable when free), or why it is not."
    )
    stateReason = serializers.CharField(
        source="state_reason", help_text="Operators only: why it is in that state."
    )
    lastHeartbeat = serializers.DateTimeField(
        source="last_heartbeat", allow_null=True, help_text="Its agent's last report."
    )
    daemonState = serializers.CharField(
        source="daemon_state", help_text="Operators only: its IMEX daemon's state."
    )
    identityChange = serializers.SerializerMethodField(
        help_text="Operators only (null for others, and when there is none): an identity "
        "change (management IP, clique, GPUs, rack) its agent or Kubernetes reported, waiting "
        "for an operator to accept it (`accept`): `changes` maps each field to its `from` and "
        "`to` values; `by` says who reported it, `since` when."
    )
    status = serializers.SerializerMethodField(
        help_text="Its one status, as every page tells it: `free`, `in_use`, `cordoned`, "
        "`draining`, `down` (an operator's mark-down wins over its agent's reports), `stale` "
        "(its agent is silent), `unknown` (never heard from, gone, pending), `blocked` (a "
        "condition), `no_address` or `foreign` (in a clique of another rack). Only `free` is "
        "placeable."
    )
    agent = serializers.SerializerMethodField(
        help_text="Whether its agent is heard from: `reporting`, `silent` (it reported once, "
        "not within the heartbeat grace: its IMEX daemon may serve on) or `never`."
    )
    inUse = serializers.SerializerMethodField(help_text="Whether a live domain holds it.")
    domain = serializers.SerializerMethodField(
        help_text="The domain holding it, if you may see that namespace; else null."
    )

    class Meta:
        model = Node
        fields = ["hostname", "managementIp", "rack", "slot", "clique", "cliqueName", "gpuCount"]
        fields += ["gpuProduct", "driverVersion", "imexVersion", "state", "stateReason"]
        fields += ["lastHeartbeat", "daemonState", "identityChange", "status", "agent"]
        fields += ["inUse", "domain"]
        extra_kwargs = {"hostname": {"help_text": "Its hostname, which names it in the API."}}

    def _member(self, node: Node) -> Any:
        live = getattr(node, "live_memberships", None)
        if live is None:
            live = list(node.memberships.filter(active=True).select_related("domain__namespace"))
        return live[0] if live else None

    def _sees(self, namespace_id: int) -> bool:
        visible = self.context.get("visible_namespace_ids", set())
        return visible is None or namespace_id in visible

    # What only operators see (the UI shows tenants none of it): where a tray is on the
    # network, why an operator cordoned it, its software and its IMEX daemon.
    OPERATOR_ONLY = ("stateReason", "driverVersion", "imexVersion", "daemonState")

    def to_representation(self, node: Node) -> dict[str, Any]:
        data = super().to_representation(node)
        if self.context.get("operator") is not True:
            for key in self.OPERATOR_ONLY:
                data[key] = ""
        return data

    @extend_schema_field(serializers.IPAddressField(allow_null=True))
    def get_managementIp(self, node: Node) -> str | None:
        """Operators only: tenants have no business with tray addresses."""
        return node.management_ip if self.context.get("operator") is True else None

    @extend_schema_field(IdentityChangeSerializer(allow_null=True))
    def get_identityChange(self, node: Node) -> dict[str, Any] | None:
        hold = node.identity_hold or {}
        if self.context.get("operator") is not True or not hold:
            return None
        return {k: hold.get(k) for k in ("changes", "by", "since")}

    def _truth(self, node: Node) -> TrayTruth:
        blocked = getattr(node, "blocked", None)
        if blocked is None:
            return node_truth(node)
        return tray_truth(
            state=node.state,
            gone=node.gone,
            heard=node.last_heartbeat,
            daemon=node.daemon_state,
            held=self._member(node) is not None,
            blocked=bool(blocked),
            has_ip=bool(node.management_ip),
            foreign=in_foreign_clique(node),
        )

    @extend_schema_field(serializers.ChoiceField(choices=list(STATUS_WORDS)))
    def get_status(self, node: Node) -> str:
        return self._truth(node).status

    @extend_schema_field(serializers.ChoiceField(choices=["reporting", "silent", "never"]))
    def get_agent(self, node: Node) -> str:
        return self._truth(node).agent

    @extend_schema_field(serializers.BooleanField())
    def get_inUse(self, node: Node) -> bool:
        return self._member(node) is not None

    @extend_schema_field(NodeDomainSerializer(allow_null=True))
    def get_domain(self, node: Node) -> dict[str, Any] | None:
        member = self._member(node)
        if member is None or not self._sees(member.domain.namespace_id):
            return None
        domain = member.domain
        return {
            "namespace": domain.namespace.name,
            "name": domain.name,
            "uid": str(domain.uid),
            "index": member.index,
        }


class NodeDetailSerializer(NodeSerializer):
    """One tray, with the conditions its agent reports (operators only)."""

    conditions = serializers.SerializerMethodField(
        help_text="Operators only (empty for others): what its agent found wrong."
    )

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "conditions"]

    @extend_schema_field(NodeConditionSerializer(many=True))
    def get_conditions(self, node: Node) -> list[dict[str, Any]]:
        if self.context.get("operator") is not True:
            return []
        return list(NodeConditionSerializer(node.conditions.all(), many=True).data)
