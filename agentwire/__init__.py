# SPDX-License-Identifier: Apache-2.0
"""The agent ↔ portal contract, owned by neither side.

`messages`: the documents a tray's agent and the portal exchange, typed, with their JSON
Schemas; `dra`: the names the agent's DRA plugin and the portal's Kubernetes objects share.
Standard library only: the node agent's image carries it beside `nodeagent/`, and the
portal's `domains/` and `portal/` import it instead of anything of the agent's.
"""
