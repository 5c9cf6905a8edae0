"""Board manifests, one JSON file per board (fields: README.md here); a package
only so that they install with edgebus and edgebus.tools.boards finds them with
importlib.resources."""
