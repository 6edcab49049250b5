"""``python -m simulator.cli``: the ``lidar-sim`` command."""

from . import main

if __name__ == "__main__":
    main()
