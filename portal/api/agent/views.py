"""The agent protocol: join, desired state, status report (docs/architecture.md).

Per-node URLs (`nodes/<id>/…`) make "a node token acts only for its own node" a check on
every request: a token presented for another node's URL is refused with 403 and logged as
an Event, so an operator sees a tray trying to read or write what is not its own.
"""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentwire.messages import ClaimAdmission, ClaimRef
from domains.agents.desired import desired_state_for
from domains.agents.facts import agent_facts_update
from domains.agents.heartbeats import agent_report
from domains.agents.joining import agent_access_denied, agent_join
from domains.computedomains.claims import claim_release
from domains.health.calls import agent_call_failed
from domains.inventory.models import Node
from domains.kube.claimcheck import claim_admit_checked
from domains.kube.tokenreview import agent_token_verify
from portal.api.agent.auth import IsNodeAgent, NodeTokenAuthentication
from portal.api.agent.serializers import (
    ClaimAdmissionSerializer,
    ClaimRequestSerializer,
    FactsSerializer,
    JoinSerializer,
    ReportSerializer,
)
from portal.api.schema import errors


class JoinView(APIView):
    """Exchange a join token (or, on Kubernetes, the agent pod's service-account token) and
    the tray's facts for a node token (shown once)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=JoinSerializer, responses={201: dict, **errors(503)}, tags=["agent"])
    def post(self, request: Request) -> Response:
        serializer = JoinSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        facts, data = serializer.facts(), serializer.validated_data
        if "service_account_token" in data:
            agent = agent_token_verify(data["service_account_token"], hostname=facts["hostname"])
            node, token = agent_join(bound_node=agent.node_name, facts=facts)
        else:
            node, token = agent_join(join_token=data["join_token"], facts=facts)
        body = {"node_id": node.pk, "hostname": node.hostname, "token": token}
        return Response(body, status=status.HTTP_201_CREATED)


class NodeScopedView(APIView):
    """Base for `nodes/<node_id>/…`: the token's node must be the URL's node."""

    # A server error (5xx) answered to a tray's authenticated agent is recorded for the
    # portal's health condition (domains.health.calls): which call, when, and why.

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    action_name = ""
    call = ""  # the call's name in the health condition: "desired state", "status report" …

    def handle_exception(self, exc: Exception) -> Response:
        try:
            response = super().handle_exception(exc)
        except Exception:
            self._failed(exc, 500)
            raise
        if response.status_code >= 500:
            self._failed(exc, response.status_code)
        return response

    def _failed(self, exc: Exception, status_code: int) -> None:
        node = getattr(self.request, "_auth", None)  # set only once the token was accepted
        if isinstance(node, Node) and node.pk == self.kwargs.get("node_id"):
            agent_call_failed(node_id=node.pk, call=self.call, status=status_code, exc=exc)

    def own_node(self, request: Request, node_id: int) -> Node:
        node = cast(Node, request.auth)  # NodeTokenAuthentication puts the tray there
        if node.pk != node_id:
            agent_access_denied(node=node, target_node_id=node_id, action=self.action_name)
            raise PermissionDenied("A node token acts only for its own node.")
        return node


class DesiredView(NodeScopedView):
    action_name = "read the desired state"
    call = "desired state"

    @extend_schema(responses={200: dict}, tags=["agent"])
    def get(self, request: Request, node_id: int) -> Response:
        return Response(desired_state_for(self.own_node(request, node_id)))


class StatusView(NodeScopedView):
    action_name = "report status"
    call = "status report"

    @extend_schema(request=ReportSerializer, responses={200: dict}, tags=["agent"])
    def post(self, request: Request, node_id: int) -> Response:
        node = self.own_node(request, node_id)
        serializer = ReportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent_report(node=node, report=serializer.document())
        body: dict[str, Any] = {"ok": True}
        return Response(body)


class FactsView(NodeScopedView):
    """The tray's facts and conditions, re-registered by its agent under the node token."""

    action_name = "update the facts"
    call = "facts"

    @extend_schema(request=FactsSerializer, responses={200: dict}, tags=["agent"])
    def put(self, request: Request, node_id: int) -> Response:
        node = self.own_node(request, node_id)
        serializer = FactsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        changed = agent_facts_update(node=node, facts=serializer.facts())
        body: dict[str, Any] = {"ok": True, "changed": changed}
        return Response(body)


class ClaimsView(NodeScopedView):
    """The tray's agent (its DRA plugin) is about to prepare a claim: admit it, or say why
    not (the agent passes the message to the kubelet, which shows it on the pod)."""

    action_name = "prepare a claim"
    call = "claim"

    @extend_schema(
        request=ClaimRequestSerializer, responses={200: ClaimAdmissionSerializer}, tags=["agent"]
    )
    def post(self, request: Request, node_id: int) -> Response:
        node = self.own_node(request, node_id)
        serializer = ClaimRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        ref = serializer.validated_data["claim"]
        admitted = claim_admit_checked(
            node=node,
            claim=ClaimRef(uid=str(ref["uid"]), namespace=ref["namespace"], name=ref["name"]),
            domain_uid=str(serializer.validated_data["domain_uid"]),
        )
        domain = admitted.domain
        body: ClaimAdmission = {
            "domain_uid": str(domain.uid),
            "domain_name": f"{domain.namespace.name}/{domain.name}",
            "index": admitted.member.index if admitted.member else -1,
            "joined": admitted.joined,
        }
        return Response(body)


class ClaimView(NodeScopedView):
    """The agent unprepared the claim on its tray."""

    action_name = "unprepare a claim"
    call = "claim release"

    @extend_schema(responses={204: None}, tags=["agent"])
    def delete(self, request: Request, node_id: int, claim_uid: str) -> Response:
        node = self.own_node(request, node_id)
        claim_release(node=node, claim_uid=str(claim_uid))
        return Response(status=status.HTTP_204_NO_CONTENT)
