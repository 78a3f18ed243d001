"""What the nodes raise: always NodeError, whose message is exactly `NODE: CODE: reason` (ComfyUI
shows it after a path-like type name, h3pipe reports the code and reason), with the same rules
and codes as h3pipe's C++ reader."""
import os
import re
import unittest
from unittest import mock

import torch

from support import ComfyDirsTest
from h3pipe_nodes import files, latent_file, nested, nodes
from h3pipe_nodes import safetensors_io as st

V2_NONE = {"h3pipe.format": "h3latent", "h3pipe.format_version": "2", "h3pipe.profile": "none",
           "h3pipe.width": "0", "h3pipe.height": "0", "h3pipe.frames": "0", "h3pipe.fps": "0",
           "h3pipe.layout": "video"}
FORMAT = re.compile(r"(H3[A-Za-z]+): ([a-z0-9_]+\.[a-z0-9_]+): (.+)", re.S)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class ErrorFormatTest(ComfyDirsTest):
    def assert_node_error(self, call, node, code=None):
        """Runs `call`; it must raise NodeError `node: code: reason`. Returns the exception."""
        try:
            call()
        except nodes.NodeError as e:
            m = FORMAT.fullmatch(str(e))
            self.assertIsNotNone(m, str(e))
            self.assertEqual((m.group(1), m.group(2)), (node, e.code))
            self.assertNotEqual(m.group(3).strip(), "")
            if code is not None:
                self.assertEqual(e.code, code, str(e))
            return e
        except Exception as e:  # noqa: BLE001 - the point: nothing else may escape
            self.fail(f"{type(e).__name__} escaped instead of NodeError: {e}")
        self.fail("no error raised")

    def test_bad_inputs_raise_node_error_with_a_code(self):
        v = randn(1, 16, 2, 2, 2)
        save = nodes.H3SaveLatent().save
        cases = [
            ("stream not a tensor", lambda: save({"samples": nested.NestedTensorStandIn(
                [v, [1, 2]])}, "x"), "latent.type"),
            ("samples None", lambda: save({"samples": None}, "x"), "latent.type"),
            ("sparse", lambda: save({"samples": v.to_sparse()}, "x", profile="none"), "latent.type"),
            ("meta device", lambda: save({"samples": torch.zeros(1, 16, 2, 2, 2, device="meta")},
                                         "x", profile="none"), "latent.type"),
            ("width not a number", lambda: save({"samples": v}, "x", width="wide", height=96,
                                                frames=9), "latent.geometry"),
            ("audio None samples", lambda: save({"samples": v}, "x", audio={"samples": None},
                                                profile="none"), None),
        ]
        for what, call, code in cases:
            with self.subTest(what):
                self.assert_node_error(call, "H3SaveLatent", code)
        self.assertEqual(self.files_under(self.out), [])

    def test_an_unexpected_exception_becomes_node_internal(self):
        with mock.patch.object(latent_file, "encode", side_effect=RuntimeError("disk on fire\n"
                                                                               "second line")):
            e = self.assert_node_error(lambda: nodes.H3SaveLatent().save(
                {"samples": randn(1, 16, 2, 2, 2)}, "x"), "H3SaveLatent", "node.internal")
        self.assertEqual(str(e), "H3SaveLatent: node.internal: RuntimeError: disk on fire "
                                 "(unexpected inside the node)")
        _, path = self.save({"samples": randn(1, 16, 2, 2, 2)})
        for node, call in (
                ("H3LoadLatent", lambda: nodes.H3LoadLatent().load(path)),
                ("H3LoadConditioning", lambda: nodes.H3LoadConditioning().load(path)),
                ("H3SaveConditioning", lambda: nodes.H3SaveConditioning().save(
                    [[randn(1, 4, 8), {}]], "c"))):
            with self.subTest(node), mock.patch.object(files, "read_checked",
                                                       side_effect=KeyError("k")), \
                    mock.patch.object(files, "publish_with_sidecar", side_effect=KeyError("k")):
                self.assert_node_error(call, node, "node.internal")

    def test_nonfinite_latent_message(self):
        video, audio = randn(1, 24, 3, 3, 4), randn(1, 32, 2, 210)
        video[0, 2, 1, 0, 3] = float("nan")
        av = {"samples": nested.NestedTensorStandIn([video, audio])}
        e = self.assert_node_error(lambda: self.save(av), "H3SaveLatent", "latent.nonfinite")
        self.assertEqual(str(e), "H3SaveLatent: latent.nonfinite: video holds 1 NaN/Inf value(s), "
                                 "the first at index (0, 2, 1, 0, 3): the sampler diverged; nothing "
                                 "was written")
        self.assertEqual(self.files_under(), [])

    def test_nonfinite_file_message(self):
        video = randn(1, 16, 2, 2, 2)
        video[0, 0, 1, 1, 0] = float("inf")
        files.publish_with_sidecar(os.path.join(self.inp, "inf.h3latent"),
                                   st.encode({"video": video}, V2_NONE))
        e = self.assert_node_error(lambda: self.load("inf.h3latent"), "H3LoadLatent",
                                   "latent.nonfinite")
        self.assertEqual(str(e), "H3LoadLatent: latent.nonfinite: video holds 1 NaN/Inf value(s), "
                                 "the first at index (0, 0, 1, 1, 0): the file holds a diverged "
                                 "latent")


class ProfileRuleTest(ComfyDirsTest):
    """H3LoadLatent given a profile applies h3pipe's reader rule (common/latent/check.cpp)."""

    def hunyuan(self):
        _, path = self.save({"samples": randn(1, 16, 3, 12, 20)}, profile="hunyuanvideo",
                            width=160, height=96, frames=9, fps=16)
        return path

    def test_a_file_made_for_another_profile_is_refused(self):
        path = self.hunyuan()
        for kw in ({}, {"width": 160, "height": 96, "frames": 9, "fps": 16}):
            with self.subTest(**kw):
                with self.assertRaises(nodes.NodeError) as cm:
                    self.load(path, profile="wan2.1", **kw)
                self.assertEqual(str(cm.exception), "H3LoadLatent: latent.profile: latent was made "
                                 "for profile hunyuanvideo, the job's profile is wan2.1")
        latent, _ = self.load(path, profile="hunyuanvideo", width=160, height=96, frames=9, fps=16)
        self.assertEqual(tuple(latent["samples"].shape), (1, 16, 3, 12, 20))
        self.load(path)  # profile "file": whatever the file names

    def test_a_file_saved_without_a_profile_is_no_jobs_latent(self):
        _, path = self.save({"samples": randn(1, 16, 3, 12, 20)}, profile="none")
        with self.assertRaisesRegex(nodes.NodeError, "latent.profile: latent was made for profile "
                                    "none, the job's profile is wan2.1"):
            self.load(path, profile="wan2.1")

    def test_the_metadata_must_name_the_job(self):
        path = self.hunyuan()
        with self.assertRaises(nodes.NodeError) as cm:
            self.load(path, profile="hunyuanvideo", width=160, height=96, frames=9, fps=24)
        self.assertEqual(str(cm.exception), "H3LoadLatent: latent.geometry: latent metadata says "
                         "job 160x96x9@16, the job is 160x96x9@24")

    def test_version_1_is_builtin(self):
        fixture = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures",
                               "latent", "valid.h3latent")
        with open(fixture, "rb") as f:
            files.publish_with_sidecar(os.path.join(self.inp, "v1.h3latent"), f.read())
        with self.assertRaisesRegex(nodes.NodeError, "latent.profile: a version 1 latent holds the "
                                    "builtin profile's grid; the job's profile is wan2.1"):
            self.load("v1.h3latent", profile="wan2.1")


if __name__ == "__main__":
    unittest.main()
