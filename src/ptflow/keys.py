"""API keys and tokens: ptflow handles their *names* only. Values stay in the environment, never in argv, files,
job scripts or logs; anything ptflow writes into a script is refused when its name looks like a secret, and what a
child process prints of a value is masked (:class:`Masker`) in everything ptflow captures or writes."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import IO

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


def looks_like_secret(name: str) -> bool:
    """An environment variable name that probably holds a secret (HF_TOKEN, OPENAI_API_KEY, DB_PASSWORD ...)."""
    return any(word in name.upper() for word in SECRET_WORDS)


def refuse_secrets(env: dict, where: str) -> None:
    """Raise when ``env`` (about to be written into ``where``) names a variable that looks like a secret."""
    for key in env:
        if looks_like_secret(key):
            raise ValueError(
                f"env {key!r} looks like a secret and would be written into {where}; secrets reach jobs through "
                "the environment they inherit, never a rendered file — remove it from the site/launcher env"
            )


# ---- masking: what a child prints never keeps a key's value ----
#
# ptflow hands key values to processes (an agent's ``keys``, the CLI's own variable derived from them such as
# CODEX_API_KEY, the judge's keys, a grader's key) through their environment; a child may still print them
# (PostTrainBench's codex solve.sh echoes $OPENAI_API_KEY and $CODEX_API_KEY). So every value is replaced by
# ``MASK`` in whatever ptflow captures or writes of a child's output, as CI systems mask their secrets in job logs.
#
# Values shorter than ``MIN_MASKED_LENGTH`` are not masked (GitLab refuses to mask a variable under 8 characters):
# a short value occurs by chance in ordinary output, so masking it would garble every log and manifest while
# protecting nothing (a short value is guessable anyway); the caller says which names were left unmasked, never
# the value. A value is masked as it is and, when it differs, with surrounding whitespace stripped; other encodings
# of it (base64, URL-quoted, JSON-escaped) are not, as in CI systems.

MASK = "***"
MIN_MASKED_LENGTH = 8
# ptflow's own variables whose names look like secrets but hold key *names* or paths: never masked
NOT_SECRETS = frozenset({"PTFLOW_AGENT_KEYS", "PTFLOW_STEP_TOKEN", "PTFLOW_SSH_KEY", "SSH_KEY_PATH"})
# public placeholders that run_task.sh sets in every run (the local vLLM server's key): not masked while they hold
# exactly that value (a user's own value under the name is masked as any other)
PUBLIC_VALUES = {"VLLM_API_KEY": "inspectai"}


class Masker:
    """Replaces each of ``values`` by ``***`` in text, bytes, streams and file copies (longest value first, so a
    value that contains another is masked whole). ``unmasked``: names whose value was too short to mask."""

    def __init__(self, values: Iterable[str | bytes] = (), unmasked: Iterable[str] = ()):
        found = set()
        for value in values:
            raw = os.fsencode(value)  # the bytes a child writes (str from os.environ: surrogateescape)
            if len(raw.strip()) >= MIN_MASKED_LENGTH:  # (eight spaces are no secret)
                found |= {raw, raw.strip()}
        self.values = sorted(found, key=lambda v: (-len(v), v))
        self.unmasked = sorted(set(unmasked))
        self._pattern = re.compile(b"|".join(re.escape(v) for v in self.values)) if self.values else None
        texts = sorted({os.fsdecode(v) for v in self.values}, key=lambda v: (-len(v), v))
        self._text = re.compile("|".join(re.escape(v) for v in texts)) if texts else None

    @classmethod
    def for_env(cls, env: Mapping[str, str] | None = None, names: Iterable[str] = ()) -> Masker:
        """The values, in ``env`` (default: this process's environment), of ``names`` (the keys ptflow hands on,
        whatever they are called) and of every variable whose name looks like a secret (the CLI's own key
        variable, HF_TOKEN, a grader's key ...), but ``NOT_SECRETS``."""
        env = os.environ if env is None else env
        wanted = set(names) | {k for k in env if looks_like_secret(k) and k not in NOT_SECRETS}
        wanted = {k for k in wanted if PUBLIC_VALUES.get(k) != env.get(k)}
        values = [env[k] for k in wanted if env.get(k)]
        short = [k for k in wanted if env.get(k) and len(os.fsencode(env[k]).strip()) < MIN_MASKED_LENGTH]
        return cls(values, short)

    def __bool__(self) -> bool:
        return bool(self.values)

    @property
    def longest(self) -> int:
        return len(self.values[0]) if self.values else 0

    def mask(self, text: str) -> str:
        return self._text.sub(MASK, text) if self._text else text

    def mask_bytes(self, data: bytes) -> bytes:
        return self._pattern.sub(MASK.encode(), data) if self._pattern else data

    def stream(self) -> MaskStream:
        return MaskStream(self)

    def copy_file(self, source: str | os.PathLike, dest: str | os.PathLike, chunk: int = 1 << 20) -> None:
        """``shutil.copyfile`` through the masker (any file: bytes are masked, nothing is decoded)."""
        stream = self.stream()
        with open(source, "rb") as src, open(dest, "wb") as out:
            while data := src.read(chunk):
                out.write(stream.feed(data))
            out.write(stream.flush())

    def notice(self) -> str | None:
        """One line naming the variables whose value is too short to be masked, or None."""
        if not self.unmasked:
            return None
        return (
            f"not masked in captured output: {', '.join(self.unmasked)} (value shorter than {MIN_MASKED_LENGTH} "
            "characters, too short to mask without garbling the logs; no real API key is that short)"
        )


class MaskStream:
    """Masks a byte stream read in chunks: a value split across two chunks is still masked. Only a tail that could
    still become a value (the start of one) is held back until the next chunk shows (or until flush); the rest is
    passed on at once, so a line the agent prints reaches its log while it runs (a ``tail -f`` is not behind)."""

    def __init__(self, masker: Masker):
        self.masker = masker
        self._pending = b""

    def _starts_a_value(self, tail: bytes, longer: bool = False) -> bool:
        """``tail`` is the beginning of a value (``longer``: of a value longer than it, which more data may match)."""
        return any(v.startswith(tail) and (len(v) > len(tail) or not longer) for v in self.masker.values)

    def feed(self, data: bytes) -> bytes:
        pattern = self.masker._pattern
        if pattern is None:
            return data
        buf = self._pending + data
        # a match that starts before `safe` lies wholly in buf (no value is longer than `longest`); from `safe` on,
        # the next chunk may still complete a longer value than the one matched
        safe = len(buf) - (self.masker.longest - 1)
        out, pos = [], 0
        for m in pattern.finditer(buf):
            if m.start() >= safe and self._starts_a_value(buf[m.start() :], longer=True):
                break
            out += [buf[pos : m.start()], MASK.encode()]
            pos = m.end()
        start = max(pos, safe)
        hold = next((p for p in range(start, len(buf)) if self._starts_a_value(buf[p:])), len(buf))
        out.append(buf[pos:hold])
        self._pending = buf[hold:]
        return b"".join(out)

    def flush(self) -> bytes:
        """The held-back tail, masked: call once the stream has ended."""
        rest, self._pending = self._pending, b""
        return self.masker.mask_bytes(rest)


class Pump:
    """A child's pipes copied into files through a masker, on one background thread, until each pipe ends (EOF) or
    :meth:`finish` gives up on a pipe that a process left behind (a daemon the agent started) still holds open."""

    def __init__(self, masker: Masker, pairs: list[tuple[IO[bytes], IO[bytes]]]):
        self.masker = masker
        self.pairs = pairs
        self.error: Exception | None = None  # the first write that failed (what came after it is lost)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ptflow-mask-pump", daemon=True)

    def start(self) -> Pump:
        self._thread.start()
        return self

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for pipe, dest in self.pairs:
            sel.register(pipe.fileno(), selectors.EVENT_READ, (dest, self.masker.stream()))
        try:
            while sel.get_map() and not self._stop.is_set():
                for key, _ in sel.select(timeout=0.5):
                    self._read(sel, key)
            # given up: take what is there now, then write the held-back tails
            while sel.get_map():
                ready = sel.select(timeout=0)
                if not ready:
                    break
                for key, _ in ready:
                    self._read(sel, key)
            for key in list(sel.get_map().values()):
                self._end(sel, key)
        finally:
            sel.close()

    def _read(self, sel, key) -> None:
        data = os.read(key.fd, 1 << 16)
        if not data:
            self._end(sel, key)
            return
        dest, stream = key.data
        self._write(dest, stream.feed(data))

    def _end(self, sel, key) -> None:
        dest, stream = key.data
        sel.unregister(key.fd)
        self._write(dest, stream.flush())

    def _write(self, dest, data: bytes) -> None:
        # a full disk must not stop the reading: the child would block on a full pipe until its time limit
        try:
            dest.write(data)
            dest.flush()  # the log grows as the child writes (tail -f, ptflow logs)
        except (OSError, ValueError) as exc:
            self.error = self.error or exc

    def finish(self, timeout: float | None = None) -> bool:
        """Wait (after the child ended) until every pipe is drained; ``timeout``: then stop reading pipes that are
        still held open. True when every pipe ended by itself."""
        self._thread.join(timeout)
        drained = not self._thread.is_alive()
        if not drained:
            self._stop.set()
            self._thread.join()
        for pipe, _ in self.pairs:
            pipe.close()
        return drained


def run_masked(argv, masker: Masker, stdout: IO[bytes], stderr: IO[bytes], timeout=None, **popen) -> int:
    """``subprocess.run(argv, stdout=stdout, stderr=stderr, timeout=timeout)`` with both streams masked on their way
    into the files; on the timeout the child is killed and TimeoutExpired raised, as subprocess.run does. stdin is
    /dev/null unless given: an agent CLI reads a pipe left open as more prompt (``opencode run`` whenever stdin is
    not a TTY) and would wait on it forever."""
    popen.setdefault("stdin", subprocess.DEVNULL)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    pump = Pump(masker, [(proc.stdout, stdout), (proc.stderr, stderr)]).start()
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        pump.finish(DRAIN_SECONDS)


DRAIN_SECONDS = 30  # after the child ended: how long a pipe a leftover process holds open is still read


def start_log_masker(log_fd: int) -> tuple[int, subprocess.Popen] | None:
    """A process that copies a pipe into ``log_fd`` through the masker of this process's environment (every
    secret-looking variable): the write end it returns becomes a job's fds 1 and 2 (``ptflow.jobenv.rule_log``), so
    the job's log lines, tracebacks and whatever its children print reach the rule log masked. A process, not a
    thread: it survives an exec of the job and reads on while a child the job left behind still writes. None when
    the environment holds no value to mask."""
    if not Masker.for_env():
        return None
    read_end, write_end = os.pipe()
    try:
        # this very ptflow, whatever the job's sys.path was made of (a warm start, a runtime's binds)
        src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = f"import sys; sys.path.insert(0, {src!r}); from ptflow.keys import _mask_stdin_to_stdout as m; m()"
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=read_end, stdout=log_fd, stderr=log_fd)
    except OSError:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return write_end, proc


def _mask_stdin_to_stdout() -> None:
    """The log masker's process: stdin to stdout through the environment's masker, until EOF. It outlives signals
    meant for the job (scancel's TERM, Ctrl-C): it ends when the last writer closes the pipe."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)
    stream = Masker.for_env().stream()
    while data := os.read(0, 1 << 16):
        os.write(1, stream.feed(data))
    os.write(1, stream.flush())
