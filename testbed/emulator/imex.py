# SPDX-License-Identifier: Apache-2.0
"""`nvidia-imex -c <config>`: the emulated daemon's entry point (the daemon is imexd.py).

A script of its own so that what Python compiles at every start is these few lines, while
the daemon's code comes from its cached bytecode (compiling it took 7 ms per start).
"""

import os
import sys

if __name__ == "__main__":
    if not __package__:  # run as a script (bin/nvidia-imex): make our package importable
        sys.path.insert(0, os.path.abspath(__file__).rsplit(os.sep, 3)[0])
    from testbed.emulator.imexd import main

    code = main()
    # Skip the interpreter's tear-down (about 1 ms of a daemon's ~15 ms of CPU): the daemon
    # flushed every file it wrote, and the kernel closes its sockets and lock as it would
    # for the real one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
