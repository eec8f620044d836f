#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Generate the DRA plugin's gRPC modules from our .proto files (`make proto`).
#
#   scripts/proto.sh [OUT_DIR]   default: the repository itself (nodeagent/dra/pb/)
#
# The modules are committed; tests/nodeagent/test_dra_proto.py runs this into a scratch
# directory and checks the committed files are what it writes. Each file gets the SPDX
# header every distributed agent file carries.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
py=${PY:-.venv/bin/python}
mkdir -p "$out"
"$py" -m grpc_tools.protoc -I . --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  nodeagent/dra/pb/*.proto
for f in "$out"/nodeagent/dra/pb/*_pb2*.py "$out"/nodeagent/dra/pb/*_pb2.pyi; do
  { echo "# SPDX-License-Identifier: Apache-2.0"; cat "$f"; } > "$f.tmp" && mv "$f.tmp" "$f"
done
