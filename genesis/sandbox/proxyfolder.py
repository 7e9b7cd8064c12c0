"""Where the box's proxy listens (bubblewrap): its unix socket, in a fresh 0700 folder of its own
under /tmp (proxy.start), bound read-only into the box (network.BOX_DIR); and the folders that
proxies of killed watchers left there, swept at the next proxy's start.

Apart from proxy.py, so that what points the box at the socket (network.bridge_argv) does not
import the proxy's server (asyncio).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import time

__all__ = ["SOCKET_NAME", "FOLDER_PREFIX", "LEFT_AFTER", "sweep"]

SOCKET_NAME = "proxy.sock"
FOLDER_PREFIX = "genesis-net-"
LEFT_AFTER = 60.0  # seconds: a proxy folder this old whose socket no one listens on was left by a killed watcher


def sweep(top: str, now: float | None = None) -> int:
    """Removes the folders under `top` that proxies of this user left when their watcher was
    killed (SIGKILL runs no clean-up): a real 0700 folder of ours, not a symlink, older than
    LEFT_AFTER, whose socket refuses a connection. Anything else is left as it is. How many went."""
    now = time.time() if now is None else now
    gone = 0
    try:
        names = [n for n in os.listdir(top) if n.startswith(FOLDER_PREFIX)][:1000]
    except OSError:
        return 0
    for name in names:
        folder = os.path.join(top, name)
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077 or \
                now - st.st_mtime < LEFT_AFTER:
            continue
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(os.path.join(folder, SOCKET_NAME))
            continue  # a live proxy
        except ConnectionRefusedError:
            pass
        except OSError:
            continue  # no socket (yet), or not ours to judge
        finally:
            probe.close()
        shutil.rmtree(folder, ignore_errors=True)
        gone += 1
    return gone
