"""Runs inside a network namespace and becomes the real command (same pid).

``launch.py PIDFILE ENVFILE CWD CMD...``: starts a new session (so the test can
signal the command's whole process group by this pid), writes the pid, and execs
CMD with the environment read from ENVFILE (JSON): ``sudo`` would have reset it.
No repository imports: it runs before the working directory is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys


def main() -> None:
    pidfile, envfile, cwd, *cmd = sys.argv[1:]
    with contextlib.suppress(PermissionError):  # already a session leader (started with start_new_session)
        os.setsid()
    with open(envfile, encoding="utf-8") as handle:
        env = json.load(handle)
    os.chdir(cwd)
    tmp = f"{pidfile}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(str(os.getpid()))
    os.replace(tmp, pidfile)  # the test never reads a half-written pid
    os.execvpe(cmd[0], cmd, env)  # noqa: S606 - becomes the command itself, keeping this pid


if __name__ == "__main__":
    main()
