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
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise SidecarError("artifact.no_sidecar", f"{side}: expected a SHA-256 hex digest, got "
                           f"{text[:80]!r}")
    return digest


def read_verified(path, require_sidecar):
    """The file's bytes after checking them against the sidecar.

    `require_sidecar`: a missing sidecar is an error (files h3pipe and these nodes write always
    have one); otherwise a file without one (e.g. core SaveLatent's) is read unchecked."""
    want = read_sidecar(path)
    if want is None and require_sidecar:
        raise SidecarError("artifact.no_sidecar", f"{path}: no {SIDECAR} sidecar beside it")
    with open(path, "rb") as f:
        data = f.read()
    if want is not None:
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            raise SidecarError("artifact.mismatch", f"{path}: SHA-256 {got} does not match its "
                               f"sidecar {want} (changed or damaged after it was written)")
    return data
