"""``python -m perfkit`` is the ``perfkit`` command."""
import sys

from perfkit.cli import main

if __name__ == "__main__":  # importing the module (pkgutil.walk_packages) must not run the command
    sys.exit(main())
