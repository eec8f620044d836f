"""Racks, cliques and trays. Every signed-in user reads the fabric; tenants see other
tenants' trays only as "in use", never which domain holds them (as in the UI)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from domains.inventory.models import Clique, Node, NodeState, Rack


class TrayCountsSerializer(serializers.Serializer):
    total = serializers.IntegerField(source="trays_total")
    ready = serializers.IntegerField(source="trays_ready")
    inUse = serializers.IntegerField(source="trays_in_use")


class RackSerializer(serializers.ModelSerializer):
    computeSlots = serializers.IntegerField(source="compute_slots")
    switchSlots = serializers.IntegerField(source="switch_slots")
    cliques = serializers.SerializerMethodField()
    trays = TrayCountsSerializer(source="*")

    class Meta:
        model = Rack
        fields = ["name", "location", "kind", "position", "computeSlots", "switchSlots"]
        fields += ["cliques", "trays"]

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_cliques(self, rack: Rack) -> list[str]:
        """The `nvidia.com/gpu.clique` labels of the rack's NVLink partitions."""
        return [clique.label for clique in rack.cliques.all()]


class CliqueSerializer(serializers.ModelSerializer):
    # A field named like DRF's own Field.label attribute, which the stubs type as text.
    label = serializers.CharField(help_text="The nvidia.com/gpu.clique label value.")  # type: ignore[assignment]
    clusterUuid = serializers.CharField(source="cluster_uuid")
    cliqueId = serializers.IntegerField(source="clique_id")
    rack = serializers.CharField(source="rack.name", allow_null=True, default=None)
    trays = TrayCountsSerializer(source="*")

    class Meta:
        model = Clique
        fields = ["label", "name", "clusterUuid", "cliqueId", "rack", "trays"]


class NodeDomainSerializer(serializers.Serializer):
    """The domain holding a tray, shown only to those who may see that namespace."""

    namespace = serializers.CharField()
    name = serializers.CharField()
    uid = serializers.UUIDField()
    index = serializers.IntegerField()


class NodeConditionSerializer(serializers.Serializer):
    """Something the tray's agent found that an operator must fix."""

    type = serializers.CharField()
    blocking = serializers.BooleanField(help_text="A blocking condition keeps it unplaceable.")
    message = serializers.CharField()
    since = serializers.DateTimeField()


class NodeSerializer(serializers.ModelSerializer):
    managementIp = serializers.SerializerMethodField()
    rack = serializers.CharField(source="rack.name", allow_null=True, default=None)
    clique = serializers.CharField(source="clique.label", allow_null=True, default=None)
    cliqueName = serializers.CharField(
        source="clique.name",
        allow_null=True,
        default=None,
        help_text="The operator's short name of the clique (the web UI's), beside its label.",
    )
    gpuCount = serializers.IntegerField(source="gpu_count")
    gpuProduct = serializers.CharField(source="gpu_product")
    driverVersion = serializers.CharField(source="driver_version")
    imexVersion = serializers.CharField(source="imex_version")
    state = serializers.ChoiceField(choices=NodeState.choices)
    stateReason = serializers.CharField(source="state_reason")
    lastHeartbeat = serializers.DateTimeField(source="last_heartbeat", allow_null=True)
    daemonState = serializers.CharField(source="daemon_state")
    inUse = serializers.SerializerMethodField()
    domain = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["hostname", "managementIp", "rack", "slot", "clique", "cliqueName", "gpuCount"]
        fields += ["gpuProduct", "driverVersion", "imexVersion", "state", "stateReason"]
        fields += ["lastHeartbeat", "daemonState", "inUse", "domain"]

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

    conditions = serializers.SerializerMethodField()

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "conditions"]

    @extend_schema_field(NodeConditionSerializer(many=True))
    def get_conditions(self, node: Node) -> list[dict[str, Any]]:
        if self.context.get("operator") is not True:
            return []
        return list(NodeConditionSerializer(node.conditions.all(), many=True).data)
