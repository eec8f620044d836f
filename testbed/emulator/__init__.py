# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for the hardware we do not have: emulated `nvidia-imex` and `nvidia-imex-ctl`,
per-tray /proc files and NVML fabric facts, and a fleet runner for many emulated trays.

Everything here follows `reference/IMEX-FACTS.md` and NVIDIA's IMEX guide, the unkind parts
included (see imexd.py and the modules it names); the node agent drives these exactly as it
drives NVIDIA's binaries, only the paths differ.

Per-tray layout under a tray root (the agent's `--root`):

    var/lib/domain-portal/imex/config.cfg  written by the agent (the daemon's -c)
    etc/hosts                          the host's hosts file: what the daemon resolves the
                                       nodes file's names through when it runs on the host
                                       (IMEX_EMU_HOSTS=etc/hosts; in a pod, /etc/hosts)
    proc/devices                       "<major> nvidia-caps-imex-channels" (tray.prepare_tray)
    proc/driver/nvidia/version         the loaded driver; the daemon refuses another version
    var/run/nvidia-imex/persist.dat    the daemon's importers (recovery after a crash)
    run/nvidia-emu/fabric.json         NVML fabric facts: GPUs, clusterUuid, cliqueId, driver
    run/nvidia-emu/faults.json         fault knobs: read at start, re-read on SIGUSR2
    run/nvidia-emu/imex.lock           held by the running daemon (a second one: NV_ERR_IN_USE)
    run/nvidia-emu/starts              one line per daemon instance that took the tray
    run/nvidia-emu/served              per cleanly stopped instance: `-q` and `-N` answered,
                                       rows sent to peers' `-N`, its CPU in ms
                                       (bench/formation.py)
"""
