"""What the bridge and the programs that join it over its local socket share
(the shell commands, tests, applications on the gateway): ``local``."""
