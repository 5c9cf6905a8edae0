"""Which code a measurement ran on: this checkout's commit, marked when it has edits."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The installed product: what the benchmarks and the soak measure.
PRODUCT = ("edgebus",)  # the host packages and the device's included


def label(paths=PRODUCT):
    """This checkout's short commit, with " + uncommitted edits" when files under
    paths differ from it; "unknown" outside a git checkout."""
    try:

        def git(*args):
            return subprocess.run(
                ["git", "-C", ROOT] + list(args), check=True, capture_output=True, text=True
            ).stdout.strip()

        dirty = git("status", "--porcelain", "--", *paths)
        return git("rev-parse", "--short", "HEAD") + (" + uncommitted edits" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
