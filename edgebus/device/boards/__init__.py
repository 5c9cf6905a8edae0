"""Board manifests, one JSON file per board (fields: README.md here); a package
only so that they install with edgebus, under edgebus/device/boards, where
edgebus.tools.boardkit.devicefiles finds them."""
