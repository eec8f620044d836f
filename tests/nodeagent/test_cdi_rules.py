"""The agent's CDI specs judged by CDI's own published schema and its library's parse-time
rules (tests.support.cdi), for claim uids that start with a digit and with a letter."""

from __future__ import annotations

import json
import uuid

import jsonschema
import pytest

from nodeagent.channels import cdi_device_node, cdi_document
from nodeagent.dra import CDI_CLAIM_KIND
from tests.support.cdi import assert_valid_cdi


@pytest.mark.parametrize(
    "uid", ["7aa48618-b3ba-4a13-8df3-74481078e049", str(uuid.UUID(int=0xA << 124))]
)
def test_a_claims_spec_passes_cdis_schema_and_rules(uid):
    devices = [{"name": uid, "containerEdits": {"deviceNodes": [cdi_device_node(0, major=235)]}}]
    spec = json.loads(cdi_document(CDI_CLAIM_KIND, devices))
    assert_valid_cdi(spec)
    # CDI asks 0.5.0 of a device name that does not start with a letter.
    assert spec["cdiVersion"] == ("0.5.0" if uid[0].isdigit() else "0.3.0")


def test_what_cdi_refuses_is_refused():
    node = {"path": "/dev/x", "major": "235"}  # the schema's int64, not a string
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_cdi(
            {
                "cdiVersion": "0.5.0",
                "kind": "a.b/c",
                "devices": [{"name": "d", "containerEdits": {"deviceNodes": [node]}}],
            }
        )
    for bad in (
        {"kind": "a.b/c", "devices": []},
        {"kind": "nokind", "devices": [{"name": "d"}]},
        {"kind": "a.b/c", "devices": [{"name": "-d"}]},
    ):
        spec = {"cdiVersion": "0.5.0", **bad}
        for device in spec["devices"]:
            device["containerEdits"] = {}
        with pytest.raises(AssertionError, match="CDI refuses"):
            assert_valid_cdi(spec)
