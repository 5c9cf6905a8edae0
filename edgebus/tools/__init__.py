"""The `edgebus` command (cli.py) and what its subcommands run: commands/ the
subcommands that act on a bridge, a board or a fleet; boardkit/ what goes on a
board (manifests, bundles, firmware images, the programs that make them);
sim/ the simulators (devices on the unix port, emulated boards, pty cables).
Development tooling is in dev/, which is not installed."""
