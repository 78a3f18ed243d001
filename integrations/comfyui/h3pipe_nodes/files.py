"""Atomic file publication with a SHA-256 sidecar, and the sidecar check on read.

Write procedure (docs/latent.md): NAME.part, fsync, rename to NAME, fsync the directory, then
NAME.sha256 the same way. A failure at any step leaves neither a .part nor a half-written file.
"""
import hashlib
import os

SIDECAR = ".sha256"


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(path, data):
    """Writes `data` to `path` atomically (part, fsync, rename, fsync dir)."""
    path = os.fspath(path)
    part = path + ".part"
    try:
        with open(part, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)
    except BaseException:
        try:
            os.unlink(part)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def publish_with_sidecar(path, data):
    """Publishes `data` at `path` and its SHA-256 at `path`.sha256; returns the hex digest.

    If the sidecar cannot be written, the published file is removed again, so a reader never
    finds a file without its sidecar from this writer."""
    digest = hashlib.sha256(data).hexdigest()
    publish(path, data)
    try:
        publish(os.fspath(path) + SIDECAR, f"{digest}  {os.path.basename(path)}\n".encode())
    except BaseException:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        raise
    return digest


def sha256_file(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


class SidecarError(ValueError):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


def read_sidecar(path):
    """The digest in `path`.sha256, or None if there is no sidecar. Raises on a malformed one."""
    side = os.fspath(path) + SIDECAR
    try:
        with open(side, "rb") as f:
            text = f.read(4096)
    except FileNotFoundError:
        return None
    fields = text.decode("ascii", "replace").split()
    digest = fields[0].lower() if fields else ""
    if not _is_digest(digest):
        raise SidecarError("artifact.no_sidecar", f"{side}: expected a SHA-256 hex digest, got "
                           f"{text[:80]!r}")
    return digest


def _is_digest(s):
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


def read_checked(path, expected=None):
    """(bytes, checked): the file's bytes, checked against `expected` (a hex SHA-256) or, when
    that is empty, against the sidecar beside it. checked is False when there was neither; the
    caller decides whether an unchecked file may be used (core SaveLatent writes no sidecar)."""
    want = (expected or "").strip().lower()
    if want and not _is_digest(want):
        raise SidecarError("artifact.bad_digest", f"expected SHA-256 \"{expected}\": not 64 hex digits")
    want = want or read_sidecar(path)
    with open(path, "rb") as f:
        data = f.read()
    if want:
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            raise SidecarError("artifact.mismatch", f"{path}: SHA-256 {got} does not match the "
                               f"expected {want} (changed or damaged after it was written)")
    return data, bool(want)
