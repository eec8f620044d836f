"""The real nodes' images, made here from Debian's `busybox-static` (nothing from a registry).

`write_layout(path)` writes an OCI image layout as a tar file holding two images that share
one layer, a root filesystem of `/bin/busybox` and its applets:

- `BUSYBOX` (`localhost/domain-portal/busybox:node`): the tests' workload pods (`sh`);
- `PAUSE` (`localhost/domain-portal/pause:node`): each pod's sandbox, which only sleeps
  (containerd's `sandbox` image, pinned so the kubelet never collects it).

The node imports the file with `ctr image import`; pods name the image with
`imagePullPolicy: Never`.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

BUSYBOX_BIN = Path("/bin/busybox")
BUSYBOX = "localhost/domain-portal/busybox:node"
PAUSE = "localhost/domain-portal/pause:node"
APPLETS = (
    "sh", "ls", "cat", "echo", "sleep", "stat", "true", "wc", "head", "tail", "grep",
    "find", "env", "id", "mount", "ps", "date", "test", "[", "sed",
)  # fmt: skip
DIRS = ("dev", "proc", "sys", "etc", "tmp", "root", "var", "run")
OCI = "application/vnd.oci.image"


def busybox_static() -> bool:
    """Whether Debian's busybox-static is installed (a static binary: no libraries needed)."""
    try:
        head = BUSYBOX_BIN.read_bytes()[:4096]
    except OSError:
        return False
    return head.startswith(b"\x7fELF") and b"ld-linux" not in head


def _layer() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in (*DIRS, "bin"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        binary = BUSYBOX_BIN.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(binary), 0o755
        tar.addfile(info, io.BytesIO(binary))
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    return out.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _image(tar: tarfile.TarFile, layer: dict[str, Any], name: str, config: dict[str, Any]) -> Any:
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], **config},
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": f"{OCI}.manifest.v1+json",
        "config": {"mediaType": f"{OCI}.config.v1+json", **_blob(tar, _json(image_config))},
        "layers": [{"mediaType": f"{OCI}.layer.v1.tar", **layer}],
    }
    return {
        "mediaType": f"{OCI}.manifest.v1+json",
        **_blob(tar, _json(manifest)),
        "annotations": {
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name,
        },
    }


def write_layout(path: Path) -> Path:
    """The OCI layout tar of both images at `path` (written again only when missing)."""
    if path.exists():
        return path
    partial = path.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        layer = _blob(tar, _layer())
        manifests = [
            _image(tar, layer, BUSYBOX, {"Cmd": ["sh"]}),
            _image(tar, layer, PAUSE, {"Entrypoint": ["/bin/sleep", "2147483647"]}),
        ]
        for name, data in (
            ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
            ("index.json", _json({"schemaVersion": 2, "manifests": manifests})),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    partial.rename(path)
    return path
