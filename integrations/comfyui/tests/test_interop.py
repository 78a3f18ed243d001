"""Interop with h3pipe's C++ side: files the nodes write pass `h3pipe latent inspect`, and files
h3pipe's writer makes (tests/comfyui_nodes/latent_writer.cpp) load in the nodes.

Binaries: $H3PIPE_BIN (default build/bin/h3pipe) and $H3PIPE_LATENT_WRITER (default
build/tests/comfyui_latent_writer); ctest sets both. Without them the cases are skipped."""
import json
import os
import subprocess
import unittest

import torch

from support import ComfyDirsTest
from h3pipe_nodes import files, nested, nodes
from h3pipe_nodes import safetensors_io as st

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
H3PIPE = os.environ.get("H3PIPE_BIN", os.path.join(REPO, "build", "bin", "h3pipe"))
WRITER = os.environ.get("H3PIPE_LATENT_WRITER",
                        os.path.join(REPO, "build", "tests", "comfyui_latent_writer"))


def need(path, what):
    if not os.access(path, os.X_OK):
        raise unittest.SkipTest(f"{what} not built at {path} (build it: cmake --build build "
                                f"--target {os.path.basename(path)})")


def inspect(path, *extra):
    r = subprocess.run([H3PIPE, "latent", "inspect", path, "--json", *extra],
                       capture_output=True, text=True, timeout=60)
    return json.loads(r.stdout), r.returncode


def v2_inspect():
    """True when this h3pipe checks latents against profiles (latent format v2 is in)."""
    r = subprocess.run([H3PIPE, "latent", "inspect", "--help"], capture_output=True, text=True,
                       timeout=60)
    return "--profile" in r.stdout + r.stderr


def pattern(shape, k):
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64)
    return (((i * 7 + k * 131) % 1001 - 500).to(torch.float32) / 64.0).reshape(shape)


class NodesToH3pipeTest(ComfyDirsTest):
    def setUp(self):
        need(H3PIPE, "h3pipe")
        super().setUp()

    def check_valid(self, path, tensors):
        j, rc = inspect(path)
        self.assertEqual((rc, j["valid"]), (0, True), j.get("error"))
        self.assertEqual(j["sha256"], files.read_sidecar(path))
        self.assertEqual({t["name"]: tuple(t["shape"]) for t in j["tensors"]}, tensors)
        self.assertEqual(j["metadata"]["h3pipe.format_version"], "2")
        return j

    def test_video_latent_is_valid_for_h3pipe(self):
        ref, path = self.save({"samples": torch.randn(1, 16, 3, 12, 20)}, width=160, height=96,
                              frames=9, fps=16)
        self.check_valid(path, {"video": (1, 16, 3, 12, 20)})

    def test_builtin_video_plus_audio_is_valid_for_h3pipe(self):
        _, path = self.save({"samples": torch.randn(1, 24, 3, 3, 4).half()},
                            audio={"samples": torch.randn(1, 32, 2, 210).half()}, profile="builtin")
        self.check_valid(path, {"video": (1, 24, 3, 3, 4), "audio": (1, 32, 2, 210)})

    def test_conditioning_is_a_tensor_file_for_h3pipe(self):
        cond = [[torch.randn(1, 77, 64), {"pooled_output": torch.randn(1, 32), "guidance": 3.5,
                                          "attention_mask": torch.ones(1, 77, dtype=torch.int64)}]]
        [ref] = nodes.H3SaveConditioning().save(cond, "h3pipe/cond")["ui"]["conditioning"]
        path = os.path.join(self.out, ref["subfolder"], ref["filename"])
        j, rc = inspect(path)
        self.assertEqual((rc, j["valid"], j["kind"]), (0, True, "tensors"), j.get("error"))
        self.assertEqual(j["sha256"], files.read_sidecar(path))

    def test_profile_checks_of_h3pipe_agree(self):
        if not v2_inspect():
            self.skipTest("this h3pipe predates latent format v2 (inspect has no --profile): "
                          "passes once the h/latent branch is merged")
        _, path = self.save({"samples": torch.randn(1, 16, 3, 12, 20)}, profile="wan2.1",
                            width=160, height=96, frames=9, fps=16)
        j, rc = inspect(path, "--profile", "wan2.1", "--geometry", "160x96x9@16")
        self.assertEqual((rc, j["valid"]), (0, True), j.get("error"))
        # a job's latent must name the job's profile and geometry (docs/latent.md)
        for profile, geometry, code in (("wan2.1", "160x96x17@16", "latent.geometry"),
                                        ("wan2.1", "160x96x9@24", "latent.geometry"),
                                        ("hunyuanvideo", "160x96x9@16", "latent.profile")):
            j, rc = inspect(path, "--profile", profile, "--geometry", geometry)
            self.assertEqual((rc, j["error"]["code"]), (1, code), (profile, geometry))
        _, path = self.save({"samples": torch.randn(1, 16, 3, 12, 20)}, profile="none")
        self.assertEqual(inspect(path)[0]["valid"], True)  # structure only
        av = {"samples": nested.NestedTensorStandIn([torch.randn(1, 128, 3, 5, 8),
                                                     torch.randn(1, 8, 18, 16)])}
        _, path = self.save(av, profile="ltx2", width=256, height=160, frames=17, fps=24)
        self.check_valid(path, {"video": (1, 128, 3, 5, 8), "audio": (1, 8, 18, 16)})
        j, rc = inspect(path, "--profile", "ltx2", "--geometry", "256x160x17@24")
        self.assertEqual((rc, j["valid"]), (0, True), j.get("error"))


    def test_a_latent_for_another_profile_is_refused_by_both(self):
        if not v2_inspect():
            self.skipTest("this h3pipe predates latent format v2 (inspect has no --profile)")
        _, path = self.save({"samples": torch.randn(1, 16, 3, 12, 20)}, profile="hunyuanvideo",
                            width=160, height=96, frames=9, fps=16)
        j, rc = inspect(path, "--profile", "wan2.1", "--geometry", "160x96x9@16")
        self.assertEqual((rc, j["valid"], j["error"]["code"]), (1, False, "latent.profile"), j)
        with self.assertRaises(nodes.NodeError) as cm:
            self.load(path, profile="wan2.1", width=160, height=96, frames=9, fps=16)
        self.assertEqual(cm.exception.code, "latent.profile")
        reason = str(cm.exception).split(": ", 2)[2]
        self.assertIn(reason, j["error"]["message"])  # one rule, one message
        for name in ("hunyuanvideo", "wan2.1"):
            self.assertIn(name, reason)


class H3pipeToNodesTest(ComfyDirsTest):
    def setUp(self):
        need(WRITER, "comfyui_latent_writer")
        super().setUp()

    def write(self, name, dtype, *args):
        path = os.path.join(self.inp, name)
        r = subprocess.run([WRITER, path, dtype, *args], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), files.read_sidecar(path))
        return path

    def test_version_1_latent_from_h3pipe(self):
        self.write("v1.h3latent", "F32", "video=1x24x3x2x2", "audio=1x32x2x210", "writer:=h3pipe")
        latent, audio = self.load("v1.h3latent")
        self.assertTrue(torch.equal(latent["samples"], pattern((1, 24, 3, 2, 2), 0)))
        self.assertTrue(torch.equal(audio["samples"], pattern((1, 32, 2, 210), 1)))

    def test_version_2_latents_from_h3pipe(self):
        v2 = ["h3pipe.format:=h3latent", "h3pipe.format_version:=2"]
        self.write("wan.h3latent", "BF16", "video=1x16x3x12x20", *v2, "h3pipe.profile:=wan2.1",
                   "h3pipe.width:=160", "h3pipe.height:=96", "h3pipe.frames:=9", "h3pipe.fps:=16",
                   "h3pipe.layout:=video")
        latent, audio = self.load("wan.h3latent", profile="wan2.1", width=160, height=96, frames=9,
                                  fps=16)
        self.assertIsInstance(audio, nodes.NoAudio)
        self.assertEqual(latent["samples"].dtype, torch.bfloat16)
        want = pattern((1, 16, 3, 12, 20), 0).to(torch.bfloat16)  # both round to nearest even
        self.assertTrue(torch.equal(latent["samples"], want))
        self.write("ltx2.h3latent", "F32", "video=1x128x3x5x8", "audio=1x8x18x16", *v2,
                   "h3pipe.profile:=ltx2", "h3pipe.width:=256", "h3pipe.height:=160",
                   "h3pipe.frames:=17", "h3pipe.fps:=24", "h3pipe.layout:=av_nested")
        latent, audio = self.load("ltx2.h3latent")
        self.assertTrue(nested.is_nested(latent["samples"]))
        self.assertTrue(torch.equal(latent["samples"].tensors[0], pattern((1, 128, 3, 5, 8), 0)))
        self.assertTrue(torch.equal(audio["samples"], pattern((1, 8, 18, 16), 1)))

    def test_h3pipe_latent_with_a_wrong_shape_is_refused(self):
        self.write("bad.h3latent", "F32", "video=1x16x3x12x20", "h3pipe.format:=h3latent",
                   "h3pipe.format_version:=2", "h3pipe.profile:=wan2.1", "h3pipe.width:=160",
                   "h3pipe.height:=96", "h3pipe.frames:=13", "h3pipe.fps:=16",
                   "h3pipe.layout:=video")
        with self.assertRaisesRegex(ValueError, r"latent.geometry: .*\(1, 16, 4, 12, 20\)"):
            self.load("bad.h3latent")


if __name__ == "__main__":
    unittest.main()
