"""The AV latent ComfyUI's own MiniMax H3 and LTX-2 nodes make: {"samples": NestedTensor((video,
audio))}, saved whole and given back as ComfyUI's class, so core VAEDecode (unbind()[0]) and
VAEDecodeAudio (unbind()[-1]) work on the loader's output; and the loader's `audio` output for a
file without audio."""
import hashlib
import importlib
import os
import shutil
import sys
import textwrap

import torch

from support import ComfyDirsTest
from h3pipe_nodes import files, nested, nodes
from h3pipe_nodes import safetensors_io as st

# Written for these tests (not ComfyUI's code): the API of comfy.nested_tensor.NestedTensor in
# ComfyUI with AV models, as its decode nodes use it.
COMFY_NESTED_TENSOR = '''\
"""Test module: the API of ComfyUI's comfy.nested_tensor.NestedTensor."""


class NestedTensor:
    def __init__(self, tensors):
        self.tensors = list(tensors)
        self.is_nested = True

    def unbind(self):
        return self.tensors

    @property
    def shape(self):
        return self.tensors[0].shape

    @property
    def dtype(self):
        return self.tensors[0].dtype

    @property
    def device(self):
        return self.tensors[0].device

    @property
    def ndim(self):
        return max(t.ndim for t in self.tensors)
'''


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def sha256_of(t):
    """SHA-256 of a tensor's raw bytes (contiguous, native order), dtype and shape aside."""
    return hashlib.sha256(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
                          .tobytes()).hexdigest()


def vae_decode_input_double(latent):
    """Test double of what core VAEDecode hands its VAE: a nested latent's first stream."""
    s = latent["samples"]
    if s.is_nested:
        s = s.unbind()[0]
    return s


def vae_decode_audio_input_double(latent):
    """Test double of what core VAEDecodeAudio hands its VAE: a nested latent's last stream."""
    s = latent["samples"]
    if s.is_nested:
        s = s.unbind()[-1]
    return s


def read_meta(path):
    with open(path, "rb") as f:
        return st.decode(f.read())[1]


class ComfyNestedTensorTest(ComfyDirsTest):
    """A `comfy` package of ComfyUI's NestedTensor API on sys.path, as inside a newer ComfyUI."""

    def setUp(self):
        super().setUp()
        root = os.path.join(self.tmp, "comfy_root")
        os.makedirs(os.path.join(root, "comfy"))
        with open(os.path.join(root, "comfy", "__init__.py"), "w") as f:
            f.write("")
        with open(os.path.join(root, "comfy", "nested_tensor.py"), "w") as f:
            f.write(textwrap.dedent(COMFY_NESTED_TENSOR))
        saved = {k: sys.modules.pop(k) for k in list(sys.modules)
                 if k == "comfy" or k.startswith("comfy.")}
        sys.path.insert(0, root)

        def restore():
            sys.path.remove(root)
            for k in [k for k in sys.modules if k == "comfy" or k.startswith("comfy.")]:
                del sys.modules[k]
            sys.modules.update(saved)
        self.addCleanup(restore)
        self.NestedTensor = importlib.import_module("comfy.nested_tensor").NestedTensor

    def transfer(self, path, name):
        """Copies the file and its sidecar into input/ under another name, as h3pipe stages it."""
        shutil.copyfile(path, os.path.join(self.inp, name))
        shutil.copyfile(path + ".sha256", os.path.join(self.inp, name + ".sha256"))
        return name

    def round_trip(self, video, audio, name, **kw):
        av = {"samples": self.NestedTensor((video, audio))}
        _, path = self.save(av, **kw)
        self.assertEqual(read_meta(path)["h3pipe.layout"], "av_nested")
        return path, self.load(self.transfer(path, name), **kw)

    def check_whole(self, latent, video, audio):
        s = latent["samples"]
        self.assertIs(type(s), self.NestedTensor)
        self.assertTrue(s.is_nested)
        self.assertEqual(len(s.tensors), 2)
        self.assertEqual(tuple(s.shape), tuple(video.shape))
        for got, want in zip(s.unbind(), (video, audio)):
            self.assertEqual((got.dtype, tuple(got.shape)), (want.dtype, tuple(want.shape)))
            self.assertEqual(sha256_of(got), sha256_of(want))
        self.assertEqual(sha256_of(vae_decode_input_double(latent)), sha256_of(video))
        self.assertEqual(sha256_of(vae_decode_audio_input_double(latent)), sha256_of(audio))

    def test_nested_latent_comes_back_as_comfyuis_class_bit_exact(self):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            with self.subTest(dtype=dtype):
                video, audio = randn(1, 128, 3, 5, 8, dtype=dtype), randn(1, 8, 18, 16, dtype=dtype,
                                                                         seed=1)
                _, (latent, a) = self.round_trip(video, audio, f"ltx2_{dtype}.h3latent",
                                                 profile="ltx2", width=256, height=160, frames=17)
                self.check_whole(latent, video, audio)
                self.assertEqual(sha256_of(vae_decode_audio_input_double(a)), sha256_of(audio))

    def test_minimax_h3_av_latent_736x416x124(self):
        # EmptyMiniMaxH3LatentAV for 736x416, length 124: T' = (124 - 5) / 17 * 5 + 2 = 37,
        # audio round(124 * 40 / 24) = 207; the seeds' 4.30 MB
        video, audio = randn(1, 24, 37, 26, 46), randn(1, 32, 2, 207, seed=1)
        g = {"profile": "minimax-h3", "width": 736, "height": 416, "frames": 124, "fps": 24}
        path, (latent, a) = self.round_trip(video, audio, "h3.h3latent", **g)
        meta = read_meta(path)
        self.assertEqual((meta["h3pipe.profile"], meta["h3pipe.frames"]), ("minimax-h3", "124"))
        self.assertEqual(round(os.path.getsize(path) / 1e6, 2), 4.30)
        self.check_whole(latent, video, audio)
        self.assertEqual(files.sha256_file(os.path.join(self.inp, "h3.h3latent")),
                         files.read_sidecar(path))

    def test_standin_when_comfyui_has_no_nested_tensor(self):
        sys.modules["comfy.nested_tensor"] = None  # as ComfyUI 0.3.64: no such module
        video, audio = randn(1, 128, 3, 5, 8), randn(1, 8, 18, 16, seed=1)
        _, path = self.save({"samples": self.NestedTensor((video, audio))}, profile="ltx2")
        latent, _ = self.load(path)
        self.assertIs(type(latent["samples"]), nested.NestedTensorStandIn)
        self.assertEqual(sha256_of(vae_decode_input_double(latent)), sha256_of(video))
        self.assertEqual(sha256_of(vae_decode_audio_input_double(latent)), sha256_of(audio))


def prompt_with(loader_id, *links):
    """An API-format prompt: the loader, and per (node id, class, input, slot) a node reading
    output `slot` of the loader."""
    p = {loader_id: {"class_type": "H3LoadLatent", "inputs": {"path": "x.h3latent"}}}
    for nid, cls, name, slot in links:
        p[nid] = {"class_type": cls, "inputs": {name: [loader_id, slot], "vae": ["99", 0]}}
    return p


class AudioOutputTest(ComfyDirsTest):
    def video_only(self):
        _, path = self.save({"samples": randn(1, 16, 3, 12, 20)}, profile="wan2.1", width=160,
                            height=96, frames=9, fps=16)
        return path

    def test_loader_declares_the_hidden_inputs_it_reads(self):
        hidden = nodes.H3LoadLatent.INPUT_TYPES()["hidden"]
        self.assertEqual(hidden, {"prompt": "PROMPT", "unique_id": "UNIQUE_ID"})
        self.assertEqual(nodes.H3LoadLatent.RETURN_NAMES, ("latent", "audio"))
        for word in ("latent", "audio", "NestedTensor", "VAEDecodeAudio"):
            self.assertIn(word, nodes.H3LoadLatent.DESCRIPTION)

    def test_a_connected_audio_output_fails_in_the_loader(self):
        path = self.video_only()
        prompt = prompt_with("5", ("7", "VAEDecode", "samples", 0),
                             ("8", "VAEDecodeAudio", "samples", 1))
        with self.assertRaises(nodes.NodeError) as cm:
            self.load(path, prompt=prompt, unique_id="5")
        msg = str(cm.exception)
        self.assertEqual(cm.exception.code, "latent.missing_tensor")
        self.assertTrue(msg.startswith("H3LoadLatent: latent.missing_tensor: "), msg)
        for part in (path, "no audio", "layout video", "wan2.1", "node 8 (VAEDecodeAudio)"):
            self.assertIn(part, msg)

    def test_an_unconnected_audio_output_loads_the_video(self):
        path = self.video_only()
        prompt = prompt_with("5", ("7", "VAEDecode", "samples", 0))
        latent, _ = self.load(path, prompt=prompt, unique_id="5")
        self.assertEqual(tuple(vae_decode_input_double(latent).shape), (1, 16, 3, 12, 20))

    def test_audio_read_without_the_prompt_raises_the_loaders_reason(self):
        # a cached loader output, or a call outside ComfyUI: the audio LATENT fails when read
        _, audio = self.load(self.video_only())
        self.assertIsNotNone(audio)
        self.assertFalse(audio)  # empty: a node testing `if audio` sees no audio
        for read in (vae_decode_audio_input_double, lambda a: a.get("samples"),
                     lambda a: a.copy()["samples"]):
            with self.assertRaises(nodes.NodeError) as cm:
                read(audio)
            self.assertEqual(cm.exception.code, "latent.missing_tensor")
            self.assertIn("no audio", str(cm.exception))
        with self.assertRaisesRegex(nodes.NodeError, "latent.missing_tensor: .*no audio"):
            nodes.H3SaveLatent().save({"samples": randn(1, 16, 3, 12, 20)}, "x", audio=audio)

    def test_a_file_with_audio_feeds_a_connected_audio_output(self):
        video, audio = randn(1, 24, 3, 3, 4), randn(1, 32, 2, 210, seed=1)
        _, path = self.save({"samples": video}, audio={"samples": audio}, profile="builtin")
        prompt = prompt_with("5", ("8", "VAEDecodeAudio", "samples", 1))
        _, a = self.load(path, prompt=prompt, unique_id="5")
        self.assertEqual(sha256_of(vae_decode_audio_input_double(a)), sha256_of(audio))


if __name__ == "__main__":
    import unittest
    unittest.main()
