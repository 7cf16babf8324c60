"""``python launch.py FOLDER [serve options]``: ``transformers serve`` that dies with its parent.

Run by :class:`suites.judge.server.LocalJudge`. Before the server starts, the process asks the Linux kernel for
SIGTERM when its parent exits (``prctl(PR_SET_PDEATHSIG)``), so a harness killed with SIGKILL cannot leave a
judge server behind; if the parent is already gone by then, it exits at once. Run by path, not as
``suites.judge.launch``, so the server does not import every suite.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(1)
    from transformers.cli.transformers import app

    sys.argv = ["transformers", "serve", *sys.argv[1:]]
    app()


if __name__ == "__main__":
    main()
