"""Installing the Debian packages a throwaway high-availability setup needs, when missing.

pg_auto_failover (``pg_autoctl``) and ``redis-sentinel`` are rarely installed on a
developer's machine. As ``bin/services`` does for Postgres and Redis, they are installed
with ``apt-get`` when the machine has it and the user may (root, or sudo without a
password); otherwise ``PackagesMissing`` says what to install, and tests skip on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from cluster.errors import PulseError

LOCK_WAIT_S = 300  # seconds to wait for an install that holds the dpkg lock
INSTALL_TIMEOUT_S = 600.0


class PackagesMissing(PulseError):
    """A command is missing and its packages cannot be installed here."""


def ensure_command(command: str, *packages: str) -> str:
    """The path of ``command``, installing ``packages`` with apt-get first when missing."""
    found = shutil.which(command)
    if found:
        return found
    wanted = " ".join(packages)
    if shutil.which("apt-get") is None:
        raise PackagesMissing(f"{command} is missing and there is no apt-get to install {wanted}")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise PackagesMissing(f"{command} is missing; install {wanted} (needs root)")
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-o", f"DPkg::Lock::Timeout={LOCK_WAIT_S}"]
    for step in ([*apt, "update", "-qq"], [*apt, "install", "-y", "-qq", *packages]):
        done = subprocess.run(
            [*prefix, *step], env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["failed"])[-1]
            raise PackagesMissing(f"cannot install {wanted}: {last}")
    found = shutil.which(command)
    if found is None:
        raise PackagesMissing(f"{wanted} installed, but {command} is still not on PATH")
    return found
