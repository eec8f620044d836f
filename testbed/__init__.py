"""The stand-in world: everything that pretends to be what a GB200 tray, a cluster or a
developer's machine would give the product, and never ships with it.

- `emulator/`: emulated `nvidia-imex` and `nvidia-imex-ctl`, emulated trays (their /proc,
  NVML facts and fault knobs) and the fleet runner that hosts many trays' agents;
- `devservices.py`: the private PostgreSQL and Redis that `make demo`, `make test` and
  `make bench` start when none is named;
- `fleetspec.py`: the emulated trays' list, written from the portal's inventory;
- `factories.py`, `processes.py`, `agents.py`, `trays.py`, `services.py`, `netcut.py`: the
  world the tests and the benchmarks arrange (rows, real server/worker/agent processes,
  emulated trays, outages, network cuts);
- `kube/`: upstream Kubernetes' control plane and nodes as the tests run them, the API mock
  for faults a real server can't show, and the objects users and clusters write.

The product's packages (`portal/`, `domains/`, `nodeagent/`, `agentwire/`,
`domain_portal/`) never import this package (an import contract in pyproject.toml says so),
and the images do not contain it.
"""
