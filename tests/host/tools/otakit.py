"""Bundles for the update tests: the real runtime built by edgebus build, its
firmware changed as a release might change it, good or bad."""

import os
import shutil

from edgebus.tools import boards, build, devicefiles

# kind -> (file under firmware/, text, replacement): what the release changed.
CHANGES = {
    # A good release: a new version string, so sys/info shows the slot's code runs.
    "good": ("__init__.py", 'VERSION = "0.1.0"', 'VERSION = "9.9.9"'),
    # A service that raises when imported.
    "crash": ("services/temp.py", "import asyncio\n", 'raise RuntimeError("boom at import")\n'),
    # A service that blocks the event loop for good: only the watchdog gets it out.
    "hang": (
        "services/temp.py",
        '    c = ctx.connect("temp")\n',
        "    while True:\n        pass\n",
    ),
    # A release whose MQTT topics moved: the device never gets a session.
    "nosession": ("__init__.py", '"prefix": "edgebus"', '"prefix": "elsewhere"'),
}


def bundle(tmp, kind, board="unix", version=None):
    """Build the bundle of a release of this kind into tmp/<kind>; its dir."""
    # The package keeps its name, firmware: the bundle's paths are the same.
    src = os.path.join(str(tmp), "src-" + kind, "firmware")
    shutil.copytree(
        devicefiles.FIRMWARE_DIR, src, ignore=shutil.ignore_patterns("__pycache__", "*.md")
    )
    if kind != "same":
        name, old, new = CHANGES[kind]
        path = os.path.join(src, name)
        with open(path) as f:
            text = f.read()
        assert old in text, "%s no longer holds %r: update otakit.CHANGES" % (name, old)
        with open(path, "w") as f:
            f.write(text.replace(old, new, 1))
    out = os.path.join(str(tmp), kind)
    build.build(
        boards.load_board(board),
        out,
        [devicefiles.CORE_DIR, src],
        bundle_version=version or kind,
        log=lambda s: None,
    )
    return out
