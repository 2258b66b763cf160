"""A throwaway S3 server on loopback, run by an external launcher script.

The kit does not ship an S3 server: a launcher outside the repository does (e.g. ``run-s3.sh``,
which runs Ceph's radosgw from Debian packages). Any script with its interface can be driven here:

    LAUNCHER PORT DATADIR

stays in the foreground, prints one line ``S3_READY <endpoint URL> <access key> <secret key>`` on
stdout once S3 answers, and stops everything it started when its own PID gets SIGTERM. The ports
``PORT`` to ``PORT + 40`` are the launcher's (run-s3.sh puts its monitor and OSD after the S3 port).

``S3Server(launcher, data_dir).start()`` picks such a free range on 127.0.0.1, runs the launcher in
a session of its own (a terminal's Ctrl-C reaches pytest, not the server behind ``stop()``'s back),
waits (bounded) for the ready line and returns an :class:`S3Endpoint`. ``client_environment()`` is
what a process needs to use it through pyarrow and boto3 as the kit does (``AWS_ENDPOINT_URL``,
keys, ``AWS_REQUEST_CHECKSUM_CALCULATION=WHEN_REQUIRED``, region ``us-east-1``). ``stop()`` sends
SIGTERM to the launcher's PID and waits; only if that does not end it, it SIGKILLs the launcher and
then the daemons whose PID files it left under ``DATADIR/run`` (each checked to be a child of this
launcher's configuration first). Only processes this object started are touched.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Mapping

from connectors.servers.child_process import log_tail, stop_gracefully

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
READY_MARK = "S3_READY"
#: How many ports after the S3 port the launcher may bind (run-s3.sh: PORT+1..PORT+40).
PORT_SPAN = 41
#: The launcher's exit status when a port or the data directory is already in use (run-s3.sh).
_BUSY_EXIT = 3


class S3ServerError(RuntimeError):
    """The server could not be started (the message carries the tail of the launcher's output)."""


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    access_key: str
    secret_key: str

    def client_environment(self) -> dict[str, str | None]:
        """The environment of a client of this server (None: unset the variable).

        pyarrow and boto3 both read these. pyarrow 22+ (AWS SDK for C++) and boto3 1.36+ add
        checksums to every PUT by default, which radosgw 16 answers with 411 MissingContentLength:
        ``WHEN_REQUIRED`` turns that off. The server knows no regions but ``us-east-1``/``default``,
        so the region is pinned, and instance metadata is never asked for one (CI has no network). A
        session token or profile of the caller's own AWS account would be sent along with these
        keys and rejected, so they are unset. Path-style addressing needs no variable: pyarrow uses
        it with an endpoint override and the kit's boto3 client with any non-AWS endpoint
        (twophase/storage/conditional_create.py's ``s3_client``).
        """
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",
            "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_SESSION_TOKEN": None,
            "AWS_PROFILE": None,
            "AWS_DEFAULT_PROFILE": None,
        }


class S3Server:
    """One run of an S3 launcher script. Use as a context manager, or ``start()`` and ``stop()``."""

    def __init__(self, launcher: str | os.PathLike[str], data_dir: str | os.PathLike[str], *,
                 port: int | None = None, environment: Mapping[str, str] | None = None,
                 start_timeout_s: float = 300.0, stop_grace_s: float = 60.0, port_attempts: int = 3) -> None:
        self.launcher = Path(launcher).expanduser().resolve()
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.environment = dict(environment or {})
        self.start_timeout_s = start_timeout_s
        # run-s3.sh gives each of its three daemons up to 10 s after SIGTERM.
        self.stop_grace_s = stop_grace_s
        self.port_attempts = port_attempts if port is None else 1
        self.endpoint: S3Endpoint | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path = self.data_dir.parent / f"{self.data_dir.name}-launcher.log"

    @property
    def pid(self) -> int | None:
        """The launcher's PID (also its session and process group id), while started."""
        return self._process.pid if self._process is not None else None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> S3Endpoint:
        if self._process is not None:
            raise S3ServerError("this S3Server is already started")
        if not self.launcher.is_file():
            raise S3ServerError(f"S3 launcher {self.launcher} does not exist (expected a script taking PORT DATADIR "
                                f"and printing '{READY_MARK} URL ACCESS SECRET', such as run-s3.sh)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            for attempt in range(1, self.port_attempts + 1):
                port = self.port or _free_port_range(PORT_SPAN)
                started = time.monotonic()
                self._spawn(port)
                self.endpoint = self._wait_until_ready(port)
                if self.endpoint is not None:
                    log.info("S3 server ready at %s after %.1f s (launcher %s, pid %d, data %s)", self.endpoint.url,
                             time.monotonic() - started, self.launcher.name, self.pid, self.data_dir)
                    return self.endpoint
                # The launcher found a port taken between our check and its own: another range.
                log.warning("S3 launcher: a port of %d..%d was taken meanwhile (attempt %d of %d)", port,
                            port + PORT_SPAN - 1, attempt, self.port_attempts)
                self._process = None
            raise S3ServerError(f"S3 launcher {self.launcher} found its ports in use {self.port_attempts} times\n"
                                f"{self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    def _spawn(self, port: int) -> None:
        # A copy of the launcher may have lost its executable bit; its interpreter then runs it.
        command = [str(self.launcher)] if os.access(self.launcher, os.X_OK) else ["bash", str(self.launcher)]
        env = {**os.environ, **self.environment}
        with open(self._log_path, "ab") as out:
            out.write(f"--- {' '.join(command)} {port} {self.data_dir}\n".encode())
            out.flush()
            self._process = subprocess.Popen([*command, str(port), str(self.data_dir)], stdout=out,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                             cwd=self.data_dir.parent, start_new_session=True)
        log.info("S3 launcher %s started on port %d (pid %d); output in %s", self.launcher, port,
                 self._process.pid, self._log_path)

    def _wait_until_ready(self, port: int) -> S3Endpoint | None:
        """The endpoint once the ready line is out; None if the launcher found a port busy."""
        assert self._process is not None
        deadline = time.monotonic() + self.start_timeout_s
        offset = self._log_path.stat().st_size if self._log_path.exists() else 0
        while time.monotonic() < deadline:
            endpoint = self._ready_line(offset)
            if endpoint is not None:
                if self._process.poll() is None:
                    return endpoint
            code = self._process.poll()
            if code is not None:
                if code == _BUSY_EXIT and "already in use" in self._new_output(offset) and self.port is None:
                    return None
                raise S3ServerError(f"S3 launcher {self.launcher} (pid {self._process.pid}, port {port}) exited "
                                    f"with code {code} before '{READY_MARK}'\n{self.log_tail()}")
            time.sleep(0.25)
        raise S3ServerError(f"S3 launcher {self.launcher} (pid {self._process.pid}, port {port}) printed no "
                            f"'{READY_MARK}' line within {self.start_timeout_s:.0f} s\n{self.log_tail()}")

    def _new_output(self, offset: int) -> str:
        try:
            with open(self._log_path, "rb") as out:
                out.seek(offset)
                return out.read().decode(errors="replace")
        except OSError:
            return ""

    def _ready_line(self, offset: int) -> S3Endpoint | None:
        # A line counts only once complete: its newline came with it.
        for line in self._new_output(offset).splitlines(keepends=True):
            fields = line.split()
            if line.endswith("\n") and len(fields) == 4 and fields[0] == READY_MARK:
                return S3Endpoint(fields[1], fields[2], fields[3])
        return None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """Stop what this object started (and only that); idempotent."""
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        self.endpoint = None
        if process is None or process.poll() is not None:
            return
        if stop_gracefully(process, self.stop_grace_s, "S3 launcher", kill_wait_s=60):
            log.info("S3 launcher (pid %d) stopped with code %s", process.pid, process.returncode)
            return
        self._kill_orphaned_daemons()

    def _kill_orphaned_daemons(self) -> None:
        """What run-s3.sh documents for a SIGKILLed supervisor: each daemon's PID file, and a kill
        only if that PID still runs with this data directory's configuration."""
        marker = f"-c {self.data_dir / 'ceph.conf'}"
        for pid_file in sorted((self.data_dir / "run").glob("*.pid")):
            try:
                pid = int(pid_file.read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError):
                continue
            if marker in cmdline:
                try:
                    os.kill(pid, signal.SIGKILL)
                    log.warning("S3 launcher: SIGKILLed its daemon %s (pid %d)", pid_file.stem, pid)
                except ProcessLookupError:
                    pass

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self._log_path, lines, missing="(no output)")

    def __enter__(self) -> "S3Server":
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _free_port_range(span: int) -> int:
    """A port P with P..P+span-1 all free on loopback, below the kernel's ephemeral range (where
    the ports that other servers of the session bind to port 0 land) and at most 65490 (run-s3.sh)."""
    low_ephemeral = 32768
    try:
        low_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    high = min(low_ephemeral, 65490 + 1) - span
    if high <= 10000:
        high = 65490 - span
    for _ in range(200):
        base = random.randrange(10000, high)
        if all(_port_free(port) for port in range(base, base + span)):
            return base
    raise S3ServerError(f"no {span} consecutive free loopback ports found")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((_HOST, port))
        except OSError:
            return False
    return True
