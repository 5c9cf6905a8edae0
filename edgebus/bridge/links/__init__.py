"""The bridge's links: serial and unix-socket (local), MQTT (its connection, the
devices' transports, the mirror), [[peer]] bridges and what they relay, each
device's quota, the links' options and their state file."""
