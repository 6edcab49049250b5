"""The benchmark as a script: ``python benchmarks/bench.py [--json] [...]``.

Same options as ``lidar-sim bench`` (it is that command).
"""

from __future__ import annotations

import sys

from simulator.cli import main

if __name__ == "__main__":
    main(["bench", *sys.argv[1:]])
