# SPDX-License-Identifier: Apache-2.0
"""Driving `nvidia-imex`: config and nodes file, one daemon per tray, readiness and health.

The same code runs NVIDIA's binaries on a tray and the emulator's in the demo and tests.
What it relies on, from NVIDIA's IMEX documentation: the config and nodes file are read
only at start; `DAEMONIZE=0` keeps the daemon in the foreground; `nvidia-imex-ctl -q` prints
exactly one word and ready means exactly `READY`; `-N -j` gives the domain state and every
peer's connection; SIGTERM is a graceful stop; a restart is a new instance and breaks
running jobs, so a restarted agent re-adopts the daemon instead of restarting it.

- `nodeagent.imex.files`: the config, the nodes file (addresses, or the stable names of a
  domain that follows its workload) and the peers' block of the hosts file;
- `nodeagent.imex.ctl`: `nvidia-imex-ctl`'s answers (the daemon's word, the domain's health);
- `nodeagent.imex.supervisor`: who keeps the daemon running (`Supervisor`): the agent itself
  (`Daemon`, in its own session, found again through a pidfile) on a host where the agent's
  restart does not take its children with it, or the IMEX runner (`nodeagent.runner`), a
  separate long-lived process the agent drives through files, where it does (a container).
"""
