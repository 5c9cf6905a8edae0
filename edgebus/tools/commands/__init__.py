"""The `edgebus` subcommands that act on something: the bus and a bridge over
its socket (pub, sub, watch, call, whoami, status, keys, provision, devices,
ota), a board (deploy, flash) and a fleet of simulated devices; cli.py imports
each only when it runs."""
