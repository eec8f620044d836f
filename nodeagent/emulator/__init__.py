# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for the hardware we do not have: emulated `nvidia-imex` and `nvidia-imex-ctl`,
per-tray /proc/devices and NVML fabric facts, and a fleet runner for many emulated trays.

Everything here follows `reference/IMEX-FACTS.md`; the node agent drives these exactly as it
drives NVIDIA's binaries, only the paths differ.

Per-tray layout under a tray root (the agent's `--root`):

    etc/nvidia-imex/config.cfg       written by the agent (the daemon's -c)
    proc/devices                     "<major> nvidia-caps-imex-channels" (tray.prepare_tray)
    run/nvidia-emu/fabric.json       NVML fabric facts: GPUs, clusterUuid, cliqueId, driver
    run/nvidia-emu/faults.json       fault knobs read by the emulated daemon at start
    run/nvidia-emu/imex.lock         held by the running daemon (a second one: NV_ERR_IN_USE)
"""
