# Runs at every boot and soft reset, before boot.py and main.py (board.c):
# mounts the littlefs "flash" (a host file through semihosting) at /.
import mps2
import vfs

IMAGE = "flash.img"  # relative to QEMU's working directory (edgebus flash sets it)
BLOCK = 4096
BLOCKS = 256  # a 1 MB flash when the image has to be created here


class HostFlash:
    """A block device (extended interface) over a host file."""

    def __init__(self, fd, blocks):
        self.fd = fd
        self.blocks = blocks

    def readblocks(self, n, buf, off=0):
        mps2.flash_readinto(self.fd, n * BLOCK + off, buf)

    def writeblocks(self, n, buf, off=0):
        mps2.flash_write(self.fd, n * BLOCK + off, buf)

    def ioctl(self, op, arg):
        if op == 4:
            return self.blocks
        if op == 5:
            return BLOCK
        if op == 6:
            return 0  # erase: littlefs rewrites whole blocks anyway
        return None


def _mount():
    fd = mps2.flash_open(IMAGE, False)
    new = fd < 0
    if new:
        fd = mps2.flash_open(IMAGE, True)
        if fd < 0:
            print("_boot: no flash: cannot open or create %s on the host" % IMAGE)
            return
    size = 0 if new else mps2.flash_size(fd)
    dev = HostFlash(fd, size // BLOCK if size >= 2 * BLOCK else BLOCKS)
    try:
        vfs.mount(vfs.VfsLfs2(dev), "/")
    except OSError:
        print("_boot: formatting the flash (%d blocks)" % dev.blocks)
        vfs.VfsLfs2.mkfs(dev)
        vfs.mount(vfs.VfsLfs2(dev), "/")


_mount()
del _mount
