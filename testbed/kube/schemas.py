"""Schema checks shared by the kube tests: NVIDIA's CRD and the Kubernetes OpenAPI schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

# NVIDIA's CRD, verbatim, as the Helm chart ships it.
CRD_PATH = (
    Path(__file__).resolve().parents[2]
    / "deploy/helm/domain-portal/crds/computedomains.resource.nvidia.com.yaml"
)
# The release of the schemas bundled with kubernetes-validate that we check against.
K8S_VERSION = "1.34.0"


def computedomain_schema() -> dict[str, Any]:
    """The v1beta1 openAPIV3Schema of NVIDIA's CRD."""
    return _crd_schema()


def assert_valid_computedomain(obj: dict[str, Any]) -> None:
    """Valid against the CRD, with no field the API server would prune."""
    schema = _closed(computedomain_schema())
    jsonschema.validate(obj, schema)


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with `additionalProperties: false` where the CRD lists properties.

    A real API server silently prunes unknown fields of a structural schema; closing the
    objects makes such a field a test failure instead of a silent loss. `metadata` stays open.
    """
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {
            k: (v if k == "metadata" else _closed(v)) for k, v in out["properties"].items()
        }
        out.setdefault("additionalProperties", False)
    if "items" in out:
        out["items"] = _closed(out["items"])
    return out


def assert_valid_kubernetes(obj: dict[str, Any]) -> None:
    """Strict validation (unknown fields fail) against the Kubernetes schema."""
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


# resource.k8s.io: v1 is checked as Kubernetes 1.34 serves it, v1beta1 as 1.32 does.
DRA_K8S_VERSIONS = {"resource.k8s.io/v1": "1.34.0", "resource.k8s.io/v1beta1": "1.32.0"}


def assert_valid_dra(obj: dict[str, Any]) -> None:
    """A ResourceSlice, ResourceClaimTemplate, DeviceClass … against its Kubernetes release."""
    kubernetes_validate.validate(obj, DRA_K8S_VERSIONS[obj["apiVersion"]], strict=True)


def dra_errors(obj: dict[str, Any]) -> str | None:
    """For the mock API server: what a real one of that release would reject."""
    try:
        assert_valid_dra(obj)
    except kubernetes_validate.ValidationError as exc:
        return str(exc)[:500]
    return None


def assert_valid_pod_template(template: dict[str, Any], namespace: str) -> None:
    """For kinds the Kubernetes schema does not know (MPIJob): check each pod template."""
    assert_valid_kubernetes(
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "check", "namespace": namespace},
            "template": template,
        }
    )


def computedomain_errors(obj: dict[str, Any]) -> str | None:
    """For the mock API server: what a real one would reject (None: valid or no CRD here)."""
    if not CRD_PATH.exists():
        return None
    body = {k: v for k, v in obj.items() if k != "metadata"}
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft7Validator(_closed(_crd_schema())).iter_errors(body)
    )
    return None if error is None else f"{'.'.join(map(str, error.absolute_path))}: {error.message}"


def _crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_PATH.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return version["schema"]["openAPIV3Schema"]
