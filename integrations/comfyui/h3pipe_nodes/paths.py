"""Where the nodes read and write: ComfyUI's output and input folders, never outside them.

Inside ComfyUI the folders come from `folder_paths`; outside (tests, tools) from the environment
variables H3PIPE_COMFY_OUTPUT / H3PIPE_COMFY_INPUT, else ./output and ./input.
"""
import os
import re

try:
    import folder_paths as _fp  # ComfyUI
except Exception:  # noqa: BLE001 - outside ComfyUI
    _fp = None


class PathError(ValueError):
    def __init__(self, message, code="path.escape"):
        super().__init__(f"{code}: {message}")
        self.code = code


def output_dir():
    if _fp is not None:
        return os.path.abspath(_fp.get_output_directory())
    return os.path.abspath(os.environ.get("H3PIPE_COMFY_OUTPUT", "output"))


def input_dir():
    if _fp is not None:
        return os.path.abspath(_fp.get_input_directory())
    return os.path.abspath(os.environ.get("H3PIPE_COMFY_INPUT", "input"))


def roots():
    """(type, folder) pairs a path may resolve into, as /view names them."""
    return [("output", output_dir()), ("input", input_dir())]


def _inside(path, root):
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base + os.sep)


def _check_relative(rel, what):
    if "\0" in rel:
        raise PathError(f"{what} \"{rel!r}\" contains a NUL byte")
    parts = rel.replace("\\", "/").split("/")
    if any(p == ".." for p in parts):
        raise PathError(f"{what} \"{rel}\" contains \"..\": it must stay inside ComfyUI's "
                        "output/input folders")


def locate(path, default_type="input"):
    """(type, folder root, absolute path) for a user-given path, checked to stay inside a root.

    Relative paths are taken in `default_type`'s folder; ComfyUI's annotation suffixes
    " [input]" and " [output]" choose the other one. Absolute paths must lie in a root."""
    path = str(path).strip()
    if not path:
        raise PathError("the path is empty", "path.empty")
    kind = default_type
    m = re.match(r"^(.*?)\s*\[(input|output)\]$", path)
    if m:
        path, kind = m.group(1), m.group(2)
    _check_relative(path, "path")
    folders = dict(roots())
    if os.path.isabs(path):
        for k, root in roots():
            if _inside(path, root):
                return k, root, os.path.abspath(path)
        raise PathError(f"\"{path}\" is outside ComfyUI's output folder ({folders['output']}) "
                        f"and input folder ({folders['input']})")
    root = folders[kind]
    full = os.path.abspath(os.path.join(root, path))
    if not _inside(full, root):  # a symlink inside the root pointing out
        raise PathError(f"\"{path}\" resolves outside ComfyUI's {kind} folder ({root})")
    return kind, root, full


def save_target(filename_prefix, extension):
    """(type, subfolder, filename, absolute path) for a new file named like ComfyUI's savers:
    PREFIX_00001_.EXT in the prefix's folder under output (or under input/output when the prefix
    is an absolute path inside one), the counter one past the highest already there."""
    kind, root, full = locate(filename_prefix or "h3pipe/latent", "output")
    folder, base = os.path.split(full)
    if not base:
        raise PathError(f"filename_prefix \"{filename_prefix}\" names a folder, not a file prefix",
                        "path.prefix")
    os.makedirs(folder, exist_ok=True)
    if not _inside(folder, root):
        raise PathError(f"filename_prefix \"{filename_prefix}\" resolves outside ComfyUI's {kind} "
                        f"folder ({root})")
    pattern = re.compile(re.escape(base) + r"_(\d{5,})_" + re.escape(extension) + r"$")
    counter = 1
    for name in os.listdir(folder):
        m = pattern.match(name)
        if m:
            counter = max(counter, int(m.group(1)) + 1)
    while True:
        name = f"{base}_{counter:05}_{extension}"
        path = os.path.join(folder, name)
        if not os.path.lexists(path) and not os.path.lexists(path + ".part"):
            break
        counter += 1
    sub = os.path.relpath(folder, root)
    return kind, "" if sub == "." else sub.replace(os.sep, "/"), name, path
