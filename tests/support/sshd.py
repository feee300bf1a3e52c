"""A real OpenSSH server (Debian's openssh-server) on a loopback address with key-only auth: the tests' "login node".

Everything (host key, client key, authorized_keys, known_hosts, config, pid, log) lives in a private temp dir;
passwords and keyboard-interactive are off, so only the throwaway key gets in. Only the sshd started here is
ever stopped (by its recorded pid).

    with LoopbackSshd("127.0.0.2", 2222) as sshd:
        subprocess.run(sshd.ssh_argv("true"))
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"


class SshdError(RuntimeError):
    """sshd could not be installed or started."""


def ensure_installed() -> None:
    if Path(SSHD).exists() and shutil.which("ssh-keygen") and shutil.which("ssh"):
        return
    if os.geteuid() != 0:
        raise SshdError("openssh-server is missing and installing it needs root: apt-get install openssh-server")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "openssh-server", "openssh-client"]):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SshdError(f"{' '.join(argv)} failed: {proc.stderr.strip()[-500:]}")


class LoopbackSshd:
    def __init__(self, address: str = "127.0.0.2", port: int = 2222, user: str | None = None):
        self.address, self.port = address, port
        self.user = user or os.environ.get("USER") or "root"
        self.dir = Path(tempfile.mkdtemp(prefix="ptflow-sshd-"))
        self.key = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.log = self.dir / "sshd.log"
        self.proc: subprocess.Popen | None = None

    # -- client side --

    def ssh_argv(self, command: str) -> list[str]:
        return [
            "ssh",
            "-i",
            str(self.key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-p",
            str(self.port),
            "-l",
            self.user,
            self.address,
            command,
        ]

    @property
    def host(self) -> str:
        return f"{self.address}:{self.port}"

    # -- server side --

    def _config(self) -> str:
        return "\n".join(
            [
                f"ListenAddress {self.address}:{self.port}",
                f"HostKey {self.dir / 'ssh_host_ed25519_key'}",
                f"PidFile {self.dir / 'sshd.pid'}",
                f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitEmptyPasswords no",
                "PermitRootLogin prohibit-password",
                "UsePAM no",
                "StrictModes no",  # the temp dir is ours; it is not a home directory
                "PrintMotd no",
                "Subsystem sftp internal-sftp",
                "",
            ]
        )

    def start(self, timeout: float = 20) -> LoopbackSshd:
        ensure_installed()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        for argv in (
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / "ssh_host_ed25519_key")],
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)],
        ):
            subprocess.run(argv, check=True, capture_output=True)
        self.key.chmod(0o600)
        shutil.copy(self.key.with_suffix(".pub"), self.dir / "authorized_keys")
        conf = self.dir / "sshd_config"
        conf.write_text(self._config())
        test = subprocess.run([SSHD, "-t", "-f", str(conf)], capture_output=True, text=True)
        if test.returncode != 0:
            raise SshdError(f"sshd -t rejected {conf}: {test.stderr.strip()}")
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(conf)], stdout=open(self.log, "wb"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SshdError(f"sshd exited ({self.proc.returncode}): {self.log.read_text()[-1000:]}")
            try:
                with socket.create_connection((self.address, self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise SshdError(f"sshd did not listen on {self.host} within {timeout:.0f} s: {self.log.read_text()[-1000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LoopbackSshd:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
