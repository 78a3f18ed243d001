"""Shared test set-up: the pack on sys.path and a fresh ComfyUI-like output/input folder pair."""
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # integrations/comfyui: `import h3pipe_nodes`

import h3pipe_nodes  # noqa: E402,F401
from h3pipe_nodes import nodes  # noqa: E402


class ComfyDirsTest(unittest.TestCase):
    """Each test gets its own output/ and input/ folders (what folder_paths gives in ComfyUI)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="h3pipe_nodes_")
        self.out = os.path.join(self.tmp, "output")
        self.inp = os.path.join(self.tmp, "input")
        os.makedirs(self.out)
        os.makedirs(self.inp)
        self._env = {k: os.environ.get(k) for k in ("H3PIPE_COMFY_OUTPUT", "H3PIPE_COMFY_INPUT")}
        os.environ["H3PIPE_COMFY_OUTPUT"] = self.out
        os.environ["H3PIPE_COMFY_INPUT"] = self.inp

    def tearDown(self):
        for k, v in self._env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.tmp, ignore_errors=True)

    def files_under(self, root=None):
        root = root or self.tmp
        found = []
        for d, _, names in os.walk(root):
            found += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return sorted(found)

    def save(self, samples, audio=None, prefix="h3pipe/latent", **kw):
        """Runs H3SaveLatent; returns (ui file ref, absolute path)."""
        ui = nodes.H3SaveLatent().save(samples, prefix, audio=audio, **kw)
        [ref] = ui["ui"]["latents"]
        root = self.out if ref["type"] == "output" else self.inp
        return ref, os.path.join(root, ref["subfolder"], ref["filename"])

    def load(self, path, **kw):
        return nodes.H3LoadLatent().load(path, **kw)
