"""What goes on a board, made on the host: the board manifests, the device's
files wherever edgebus is installed, .mpy bundles, firmware images and
littlefs images, and the programs that make them (mpy-cross, micropython)."""
