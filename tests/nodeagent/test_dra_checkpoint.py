"""The DRA plugin's checkpoint on disk: typed, versioned, and read across versions."""

from __future__ import annotations

import json
import uuid

import jsonschema

from nodeagent.dra.checkpoint import (
    CHECKPOINT_SCHEMA,
    VERSION,
    Checkpoint,
    CheckpointedClaim,
    ClaimState,
)

UID = str(uuid.uuid4())


def test_what_it_writes_is_its_own_schema(tmp_path) -> None:
    checkpoint = Checkpoint(path=tmp_path / "checkpoint.json", boot_id="b-1")
    checkpoint.claims[UID] = CheckpointedClaim(
        namespace="team-a",
        name="w-0-channel",
        domain_uid=str(uuid.uuid4()),
        state=ClaimState.PREPARED,
        request="channel",
        pool="tray-1",
        cdi_device_ids=(f"imex-channel.portal.domains/claim={UID}",),
    )
    checkpoint.save()
    doc = json.loads(checkpoint.path.read_text())
    jsonschema.validate(doc, CHECKPOINT_SCHEMA)
    assert doc["version"] == VERSION
    assert Checkpoint.load(checkpoint.path) == checkpoint


def test_a_version_1_file_is_read_as_the_current_version(tmp_path) -> None:
    """What an agent before the typed checkpoint wrote: one `cdi_device_id`, no version 2
    fields; the claim is kept as it was, and written back in the current version."""
    path = tmp_path / "checkpoint.json"
    v1 = {
        "version": 1,
        "boot_id": "b-0",
        "claims": {
            UID: {
                "namespace": "team-a",
                "name": "w-0-channel",
                "domain_uid": "d-1",
                "request": "channel",
                "pool": "tray-1",
                "state": "prepared",
                "cdi_device_id": f"imex-channel.portal.domains/claim={UID}",
            },
            "00000000-0000-4000-8000-000000000000": {
                "namespace": "team-a",
                "name": "w-1-channel",
                "domain_uid": "d-1",
                "request": "channel",
                "pool": "tray-1",
                "state": "admitting",
            },
        },
    }
    path.write_text(json.dumps(v1))
    checkpoint = Checkpoint.load(path)
    assert checkpoint.boot_id == "b-0"
    claim = checkpoint.claims[UID]
    assert claim.state == ClaimState.PREPARED
    assert claim.cdi_device_ids == (f"imex-channel.portal.domains/claim={UID}",)
    begun = checkpoint.claims["00000000-0000-4000-8000-000000000000"]
    assert begun.state == ClaimState.ADMITTING and begun.cdi_device_ids == ()
    checkpoint.save()
    jsonschema.validate(json.loads(path.read_text()), CHECKPOINT_SCHEMA)


def test_a_state_of_a_newer_agent_is_read_as_begun_so_unprepare_undoes_it(tmp_path) -> None:
    path = tmp_path / "checkpoint.json"
    claim = {"namespace": "team-a", "name": "w", "domain_uid": "d", "state": "frobbed"}
    path.write_text(json.dumps({"version": VERSION + 1, "claims": {UID: claim}}))
    assert Checkpoint.load(path).claims[UID].state == ClaimState.ADMITTING


def test_no_file_is_an_empty_checkpoint(tmp_path) -> None:
    checkpoint = Checkpoint.load(tmp_path / "absent.json")
    assert checkpoint.claims == {} and checkpoint.boot_id == ""
