# SPDX-License-Identifier: Apache-2.0
import sys

from nodeagent.cli import main

sys.exit(main())
