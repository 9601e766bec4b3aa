"""A plugin that does not import (as one whose dependency is missing)."""
raise ImportError("perfkit_demo.broken needs libdemo, which is not installed")
