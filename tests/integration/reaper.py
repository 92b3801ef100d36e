"""The init of a stand-in host: runs its sshd and reaps every orphan below it.

A real host's init reaps the daemons lockcheck starts there once the SSH session that
started them ends; this machine's PID 1 does not, so a stand-in host gets this
(PR_SET_CHILD_SUBREAPER). SIGTERM stops the sshd; the reaper exits when it has no
children left.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    child = subprocess.Popen(argv)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
