"""``python die_with_parent.py PROGRAM [ARGS...]``: exec ``PROGRAM`` so that it dies with the process that started it.

Run (by path, so it imports nothing of mixbench) by :class:`harness.llm_judge.local_server.LocalJudge`. Before the
server starts, this process asks the Linux kernel for SIGTERM when its parent exits (``prctl(PR_SET_PDEATHSIG)``;
the request survives ``execve``), so a harness killed with SIGKILL cannot leave a judge server behind; if the
parent is already gone by then, it exits at once.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: die_with_parent.py PROGRAM [ARGS...]")
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(1)
    os.execv(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
