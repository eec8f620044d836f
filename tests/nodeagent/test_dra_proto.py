"""The DRA plugin's gRPC modules: generated from our .proto files, and on the kubelet's wire.

The kubelet matches services by their full names and messages by field numbers, so those
are pinned here as the kubelet's contract states them (k8s.io/kubelet pluginregistration
v1 and dra v1/v1beta1); a typo in our .proto would fail here, not on a node.
"""

from __future__ import annotations

import subprocess

import pytest

from nodeagent.dra.pb import dra_v1_pb2, dra_v1beta1_pb2, registration_pb2
from testbed.processes import ROOT, VENV_BIN


def test_make_proto_writes_exactly_the_committed_modules(tmp_path):
    subprocess.run(
        ["bash", "scripts/proto.sh", str(tmp_path)],
        cwd=ROOT,
        check=True,
        env={"PY": str(VENV_BIN / "python"), "PATH": "/usr/bin:/bin"},
    )
    generated = sorted((tmp_path / "nodeagent/dra/pb").glob("*_pb2*"))
    assert [p.name for p in generated] == sorted(
        p.name for p in (ROOT / "nodeagent/dra/pb").glob("*_pb2*")
    )
    for path in generated:
        committed = ROOT / "nodeagent/dra/pb" / path.name
        assert committed.read_text() == path.read_text(), f"run `make proto`: {path.name}"


def fields(message) -> dict[str, tuple[int, str]]:
    return {
        f.name: (f.number, "repeated" if f.is_repeated else "optional")
        for f in message.DESCRIPTOR.fields
    }


def test_registration_speaks_the_kubelets_package_and_fields():
    service = registration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    assert [m.name for m in service.methods] == ["GetInfo", "NotifyRegistrationStatus"]
    assert fields(registration_pb2.PluginInfo) == {
        "type": (1, "optional"),
        "name": (2, "optional"),
        "endpoint": (3, "optional"),
        "supported_versions": (4, "repeated"),
    }
    assert fields(registration_pb2.RegistrationStatus) == {
        "plugin_registered": (1, "optional"),
        "error": (2, "optional"),
    }


@pytest.mark.parametrize(("module", "version"), [(dra_v1_pb2, "v1"), (dra_v1beta1_pb2, "v1beta1")])
def test_the_dra_service_speaks_the_kubelets_package_and_fields(module, version):
    service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert service.full_name == f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
    assert [m.name for m in service.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
    assert fields(module.Claim) == {
        "namespace": (1, "optional"),
        "uid": (2, "optional"),
        "name": (3, "optional"),
    }
    assert fields(module.Device) == {
        "request_names": (1, "repeated"),
        "pool_name": (2, "optional"),
        "device_name": (3, "optional"),
        "cdi_device_ids": (4, "repeated"),
    }
    assert fields(module.NodePrepareResourceResponse) == {
        "devices": (1, "repeated"),
        "error": (2, "optional"),
    }
    assert fields(module.NodeUnprepareResourceResponse) == {"error": (1, "optional")}
    for answer in (module.NodePrepareResourcesResponse, module.NodeUnprepareResourcesResponse):
        claims = answer.DESCRIPTOR.fields_by_name["claims"]
        assert claims.number == 1 and claims.message_type.GetOptions().map_entry
        assert claims.message_type.fields_by_name["key"].type == claims.TYPE_STRING
