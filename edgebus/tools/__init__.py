"""The `edgebus` command (cli.py) and what its subcommands run: board manifests,
builds, deploy, flash, the fleet simulator and the external programs they call.
Development tooling is in dev/, which is not installed."""
