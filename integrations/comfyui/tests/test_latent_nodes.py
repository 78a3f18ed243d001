"""H3SaveLatent / H3LoadLatent: round trips for every LATENT shape ComfyUI's video models make,
and the refusals (NaN, bad shapes, tampering, paths outside ComfyUI's folders)."""
import os
import unittest

import torch

from support import ComfyDirsTest
from h3pipe_nodes import NODE_CLASS_MAPPINGS, files, nested, nodes
from h3pipe_nodes import safetensors_io as st

# (profile, video shape, geometry W x H x F) as the core empty-latent nodes make them
VIDEO_CASES = [
    ("wan2.1", (1, 16, 3, 12, 20), (160, 96, 9)),        # EmptyHunyuanLatentVideo / Wan 2.1
    ("hunyuanvideo", (1, 16, 7, 60, 106), (848, 480, 25)),  # EmptyHunyuanLatentVideo defaults
    ("wan2.2-5b", (1, 48, 3, 6, 10), (160, 96, 9)),      # Wan22ImageToVideoLatent
    ("ltxv", (1, 128, 3, 5, 8), (256, 160, 17)),         # EmptyLTXVLatentVideo
    ("mochi", (1, 12, 3, 12, 20), (160, 96, 13)),        # EmptyMochiLatentVideo
]


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def read_meta(path):
    with open(path, "rb") as f:
        return st.decode(f.read())[1]


class VideoLatentTest(ComfyDirsTest):
    def test_plain_video_latent_round_trips_for_each_profile(self):
        for profile, shape, (w, h, f) in VIDEO_CASES:
            with self.subTest(profile=profile):
                video = randn(*shape)
                ref, path = self.save({"samples": video, "batch_index": [0]}, profile=profile,
                                      width=w, height=h, frames=f, fps=16)
                meta = read_meta(path)
                self.assertEqual(meta["h3pipe.format"], "h3latent")
                self.assertEqual(meta["h3pipe.format_version"], "2")
                self.assertEqual(meta["h3pipe.profile"], profile)
                self.assertEqual(meta["h3pipe.layout"], "video")
                self.assertEqual((meta["h3pipe.width"], meta["h3pipe.height"],
                                  meta["h3pipe.frames"], meta["h3pipe.fps"]),
                                 (str(w), str(h), str(f), "16"))
                latent, audio = self.load(f"{ref['subfolder']}/{ref['filename']} [output]")
                self.assertIsInstance(audio, nodes.NoAudio)  # no audio: empty, raises if read
                self.assertTrue(torch.equal(latent["samples"], video))
                self.assertEqual(latent["batch_index"], [0])
                self.assertEqual(files.sha256_file(path), files.read_sidecar(path))

    def test_auto_profile_derives_the_geometry(self):
        _, path = self.save({"samples": randn(1, 128, 3, 5, 8)})
        meta = read_meta(path)
        self.assertEqual(meta["h3pipe.profile"], "ltxv")
        self.assertEqual((meta["h3pipe.width"], meta["h3pipe.height"], meta["h3pipe.frames"]),
                         ("256", "160", "17"))
        _, path = self.save({"samples": randn(1, 16, 7, 60, 106)})
        self.assertEqual(read_meta(path)["h3pipe.profile"], "wan2.1")  # first of wan2.1/hunyuan

    def test_files_are_numbered_like_comfyui_savers(self):
        a, _ = self.save({"samples": randn(1, 16, 2, 2, 2)}, prefix="run7/job1_sample")
        b, _ = self.save({"samples": randn(1, 16, 2, 2, 2)}, prefix="run7/job1_sample")
        self.assertEqual((a["subfolder"], a["filename"]), ("run7", "job1_sample_00001_.h3latent"))
        self.assertEqual(b["filename"], "job1_sample_00002_.h3latent")
        self.assertEqual(a["type"], "output")

    def test_half_precision_round_trips_exactly(self):
        for dtype, name in ((torch.float16, "F16"), (torch.bfloat16, "BF16")):
            with self.subTest(dtype=name):
                video = randn(1, 16, 3, 4, 6, dtype=dtype)
                audio = randn(1, 64, 40, dtype=dtype, seed=1)
                ref, path = self.save({"samples": video}, audio={"samples": audio, "type": "audio"},
                                      profile="none")
                with open(path, "rb") as f:
                    n = int.from_bytes(f.read(8), "little")
                    self.assertEqual(n % 8, 0)
                    self.assertIn(f'"dtype":"{name}"'.encode(), f.read(n))
                latent, a = self.load(path)
                self.assertEqual(latent["samples"].dtype, dtype)
                self.assertTrue(torch.equal(latent["samples"], video))
                self.assertTrue(torch.equal(a["samples"], audio))


class AudioLatentTest(ComfyDirsTest):
    def test_builtin_video_plus_audio_latents(self):
        video = randn(1, 24, 3, 3, 4)  # 64x48, 9 frames at 24 fps
        audio = randn(1, 32, 2, 210, seed=1)  # L = ceil(9 / 24 * 48000 / 86)
        ref, path = self.save({"samples": video}, audio={"samples": audio, "type": "audio",
                                                         "sample_rate": 48000},
                              width=64, height=48, frames=9, fps=24, profile="builtin")
        meta = read_meta(path)
        self.assertEqual((meta["h3pipe.profile"], meta["h3pipe.layout"]), ("builtin", "video+audio"))
        latent, a = self.load(path)
        self.assertTrue(torch.equal(latent["samples"], video))
        self.assertTrue(torch.equal(a["samples"], audio))
        self.assertEqual((a["type"], a["sample_rate"]), ("audio", 48000))

    def test_auto_finds_builtin_and_the_frame_count_from_the_audio(self):
        _, path = self.save({"samples": randn(1, 24, 31, 26, 46)},
                            audio={"samples": randn(1, 32, 2, 2884)})  # 736x416x124 @ 24
        meta = read_meta(path)
        self.assertEqual((meta["h3pipe.profile"], meta["h3pipe.frames"]), ("builtin", "124"))

    def test_stable_audio_latent_needs_profile_none(self):
        # core EmptyLatentAudio: (B, 64, L), {"type": "audio"}; no built-in profile has it
        video, audio = randn(1, 16, 7, 60, 106), randn(1, 64, 1026)
        with self.assertRaises(nodes.NodeError) as cm:
            self.save({"samples": video}, audio={"samples": audio, "type": "audio"})
        self.assertIn("fits no built-in latent profile", str(cm.exception))
        self.assertEqual(self.files_under(), [])
        ref, path = self.save({"samples": video}, audio={"samples": audio, "type": "audio"},
                              profile="none")
        meta = read_meta(path)
        self.assertEqual((meta["h3pipe.profile"], meta["h3pipe.width"]), ("none", "0"))
        latent, a = self.load(path)
        self.assertTrue(torch.equal(a["samples"], audio))
        self.assertEqual(a["type"], "audio")

    def test_ltx2_nested_av_latent_round_trips_whole(self):
        video, audio = randn(1, 128, 3, 5, 8), randn(1, 8, 18, 16, seed=2)  # 256x160x17 @ 24
        av = {"samples": nested.NestedTensorStandIn([video, audio]), "type": "av"}
        ref, path = self.save(av, width=256, height=160, frames=17, fps=24, profile="ltx2")
        meta = read_meta(path)
        self.assertEqual((meta["h3pipe.profile"], meta["h3pipe.layout"]), ("ltx2", "av_nested"))
        latent, a = self.load(path)
        s = latent["samples"]
        self.assertTrue(nested.is_nested(s))
        self.assertEqual(len(s.unbind()), 2)
        self.assertTrue(torch.equal(s.tensors[0], video))
        self.assertTrue(torch.equal(s.tensors[1], audio))
        self.assertEqual(latent["type"], "av")
        self.assertEqual(s.shape, video.shape)  # ComfyUI's NestedTensor API
        self.assertTrue(torch.equal(a["samples"], audio))

    def test_nested_latent_with_a_separate_audio_is_refused(self):
        av = {"samples": nested.NestedTensorStandIn([randn(1, 128, 3, 5, 8), randn(1, 8, 18, 16)])}
        with self.assertRaisesRegex(nodes.NodeError, "already carries the audio"):
            self.save(av, audio={"samples": randn(1, 8, 18, 16)})
        self.assertEqual(self.files_under(), [])


class RefusalTest(ComfyDirsTest):
    def test_nan_and_inf_are_refused_and_nothing_is_written(self):
        for bad in (float("nan"), float("inf"), float("-inf")):
            for where in ("video", "audio"):
                with self.subTest(value=bad, where=where):
                    video, audio = randn(1, 24, 3, 3, 4), randn(1, 32, 2, 210)
                    (video if where == "video" else audio)[0, 1, 1, 1] = bad
                    with self.assertRaises(nodes.NodeError) as cm:
                        self.save({"samples": video}, audio={"samples": audio})
                    self.assertEqual(cm.exception.code, "latent.nonfinite")
                    self.assertIn(where, str(cm.exception))
                    self.assertEqual(self.files_under(), [])

    def test_a_failed_sidecar_write_leaves_no_latent(self):
        os.makedirs(os.path.join(self.out, "h3pipe", "latent_00001_.h3latent.sha256"))  # blocks it
        with self.assertRaises(nodes.NodeError):
            self.save({"samples": randn(1, 16, 2, 2, 2)})
        self.assertEqual(self.files_under(), [])

    def test_bad_shapes_are_refused_with_the_reason(self):
        cases = [
            ({"samples": randn(1, 4, 8, 8)}, {}, "rank 5"),            # an image latent
            ({"samples": randn(2, 16, 3, 4, 4)}, {}, "batch 2"),
            ({"samples": randn(1, 16, 3, 12, 20)}, {"profile": "ltxv"}, "128"),
            ({"samples": randn(1, 16, 3, 12, 20)},
             {"profile": "wan2.1", "width": 160, "height": 96, "frames": 10}, "4k+1"),
            ({"samples": randn(1, 16, 3, 12, 20)},
             {"profile": "wan2.1", "width": 160, "height": 96, "frames": 13}, "(1, 16, 4, 12, 20)"),
            ({"samples": randn(1, 16, 3, 12, 20)}, {"width": 160}, "give all three"),
            ({"samples": randn(1, 24, 3, 3, 4)}, {"profile": "builtin"}, "needs an audio latent"),
            ({"samples": randn(1, 64, 3, 3, 4)}, {}, "fits no built-in"),
            ({"samples": randn(1, 16, 3, 4, 4).double()}, {"profile": "none"}, "F32, F16 or BF16"),
            ({"latent": randn(1, 16, 3, 4, 4)}, {}, "must be a LATENT"),
        ]
        for samples, kw, reason in cases:
            with self.subTest(reason=reason):
                with self.assertRaises(nodes.NodeError) as cm:
                    self.save(samples, **kw)
                self.assertIn(reason, str(cm.exception))
                self.assertTrue(str(cm.exception).startswith("H3SaveLatent: "))
                self.assertEqual(self.files_under(), [])

    def test_load_checks_against_a_profile_and_geometry(self):
        ref, path = self.save({"samples": randn(1, 16, 3, 12, 20)})
        self.load(path, profile="wan2.1", width=160, height=96, frames=9)
        with self.assertRaisesRegex(nodes.NodeError, r"latent.geometry: .*\(1, 16, 5, 12, 20\)"):
            self.load(path, profile="wan2.1", width=160, height=96, frames=17)
        with self.assertRaisesRegex(nodes.NodeError, "latent.profile: latent was made for profile "
                                    "wan2.1, the job's profile is ltxv"):
            self.load(path, profile="ltxv")
        # profile "file": the geometry is checked against the profile the file names (wan2.1)
        with self.assertRaisesRegex(nodes.NodeError, r"latent.geometry: .*\(1, 16, 5, 12, 20\)"):
            self.load(path, width=160, height=96, frames=17)
        _, none = self.save({"samples": randn(1, 16, 3, 12, 20)}, profile="none")
        with self.assertRaisesRegex(nodes.NodeError, "latent.profile: the file's profile is \"none\""):
            self.load(none, width=160, height=96, frames=9)
        with self.assertRaisesRegex(nodes.NodeError, "latent.profile: latent was made for profile "
                                    "none"):  # as h3pipe's reader: no job's latent
            self.load(none, profile="hunyuanvideo", width=160, height=96, frames=9)

    def test_a_tampered_file_fails_the_sidecar_check(self):
        _, path = self.save({"samples": randn(1, 16, 3, 4, 4)})
        with open(path, "r+b") as f:
            f.seek(-3, os.SEEK_END)
            f.write(b"\x7f")
        with self.assertRaises(nodes.NodeError) as cm:
            self.load(path)
        self.assertEqual(cm.exception.code, "artifact.mismatch")
        good = files.sha256_file(path)
        self.load(path, sha256=good)  # an explicit digest replaces the sidecar
        os.unlink(path + ".sha256")
        with self.assertRaises(nodes.NodeError) as cm:
            self.load(path)
        self.assertEqual(cm.exception.code, "artifact.no_sidecar")
        self.load(path, sha256=good.upper())
        with self.assertRaisesRegex(nodes.NodeError, "artifact.bad_digest"):
            self.load(path, sha256="abc")

    def test_paths_outside_comfyui_folders_are_refused(self):
        v = {"samples": randn(1, 16, 2, 2, 2)}
        outside = os.path.join(self.tmp, "elsewhere")
        os.makedirs(outside)
        os.symlink(outside, os.path.join(self.out, "link"))
        for prefix in ("../escape", "a/../../escape", "/etc/h3pipe", outside + "/x", "link/x"):
            with self.subTest(prefix=prefix):
                with self.assertRaises(nodes.NodeError) as cm:
                    self.save(v, prefix=prefix)
                self.assertEqual(cm.exception.code, "path.escape")
        self.assertEqual(self.files_under(outside), [])
        _, inside = self.save(v, prefix=os.path.join(self.out, "abs", "x"))  # absolute, inside
        self.assertTrue(inside.startswith(os.path.join(self.out, "abs")))
        for path in ("../../etc/passwd", "/etc/passwd", "link/x_00001_.h3latent [output]"):
            with self.subTest(path=path):
                with self.assertRaises(nodes.NodeError) as cm:
                    self.load(path)
                self.assertEqual(cm.exception.code, "path.escape")
                self.assertIn("path.escape", nodes.H3LoadLatent.VALIDATE_INPUTS(path))
        self.assertIn("path.missing", nodes.H3LoadLatent.VALIDATE_INPUTS("nope.h3latent"))
        self.assertIs(nodes.H3LoadLatent.VALIDATE_INPUTS(inside), True)

    def test_is_changed_follows_the_file_content(self):
        _, path = self.save({"samples": randn(1, 16, 2, 2, 2)}, prefix="x")
        first = nodes.H3LoadLatent.IS_CHANGED(path)
        self.assertEqual(first, nodes.H3LoadLatent.IS_CHANGED(path, profile="file"))
        self.assertEqual(first, files.sha256_file(path))
        other = {"samples": randn(1, 16, 2, 2, 2, seed=9)}
        from h3pipe_nodes import latent_file
        files.publish_with_sidecar(path, latent_file.encode(nodes.build_latent_file(
            other, None, "auto", None)))
        self.assertNotEqual(nodes.H3LoadLatent.IS_CHANGED(path), first)
        self.assertTrue(torch.equal(self.load(path)[0]["samples"], other["samples"]))


    def test_save_nodes_run_on_every_prompt(self):
        # ComfyUI re-runs a node whose IS_CHANGED differs from the cached value; NaN never equals
        for cls in (nodes.H3SaveLatent, nodes.H3SaveConditioning):
            v = cls.IS_CHANGED(samples=None, filename_prefix="x")
            self.assertNotEqual(v, v)


class OtherFormatsTest(ComfyDirsTest):
    def test_core_savelatent_file_loads_without_a_sidecar(self):
        video = randn(1, 16, 7, 60, 106)
        data = st.encode({"latent_tensor": video, "latent_format_version_0": torch.tensor([])},
                         {"prompt": "{}"})
        with open(os.path.join(self.inp, "core.latent"), "wb") as f:
            f.write(data)
        latent, audio = self.load("core.latent")
        self.assertTrue(torch.equal(latent["samples"], video))
        self.assertIsInstance(audio, nodes.NoAudio)
        # core's .latent names no profile: a profile checks its shapes only
        self.load("core.latent", profile="hunyuanvideo", width=848, height=480, frames=25)
        with self.assertRaisesRegex(nodes.NodeError, "has 128"):
            self.load("core.latent", profile="ltxv")
        legacy = st.encode({"latent_tensor": video})
        with open(os.path.join(self.inp, "sd1.latent"), "wb") as f:
            f.write(legacy)
        with self.assertRaisesRegex(nodes.NodeError, "latent.legacy"):
            self.load("sd1.latent")

    def test_version_1_file_loads(self):
        fixture = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures",
                               "latent", "valid.h3latent")
        with open(fixture, "rb") as f:
            data = f.read()
        files.publish_with_sidecar(os.path.join(self.inp, "v1.h3latent"), data)
        latent, audio = self.load("v1.h3latent")
        self.assertEqual(tuple(latent["samples"].shape), (1, 24, 1, 2, 2))
        self.assertEqual(tuple(audio["samples"].shape), (1, 32, 2, 3))

    def test_unknown_format_version_is_refused(self):
        data = st.encode({"video": randn(1, 16, 2, 2, 2)},
                         {"h3pipe.format": "h3latent", "h3pipe.format_version": "3"})
        files.publish_with_sidecar(os.path.join(self.inp, "v3.h3latent"), data)
        with self.assertRaisesRegex(nodes.NodeError, "latent.version"):
            self.load("v3.h3latent")


    def test_version_2_metadata_is_required(self):
        full = {"h3pipe.format": "h3latent", "h3pipe.format_version": "2", "h3pipe.profile": "none",
                "h3pipe.width": "0", "h3pipe.height": "0", "h3pipe.frames": "0", "h3pipe.fps": "0",
                "h3pipe.layout": "video"}
        video = randn(1, 16, 2, 2, 2)
        for drop, value in [("h3pipe.layout", None), ("h3pipe.profile", None), ("h3pipe.fps", None),
                            ("h3pipe.fps", "23.976"), ("h3pipe.width", "-1"), ("h3pipe.width", "\u00b2"),
                            ("h3pipe.format", "h3cond"), ("h3pipe.layout", "video+audio")]:
            with self.subTest(key=drop, value=value):
                meta = dict(full)
                if value is None:
                    del meta[drop]
                else:
                    meta[drop] = value
                files.publish_with_sidecar(os.path.join(self.inp, "m.h3latent"),
                                           st.encode({"video": video}, meta))
                with self.assertRaisesRegex(nodes.NodeError, "latent.(metadata|missing_tensor)"):
                    self.load("m.h3latent")
        files.publish_with_sidecar(os.path.join(self.inp, "m.h3latent"), st.encode({"video": video}, full))
        self.assertTrue(torch.equal(self.load("m.h3latent")[0]["samples"], video))


class RegistrationTest(unittest.TestCase):
    def test_node_classes_and_legacy_names(self):
        for name in ("H3SaveLatent", "H3LoadLatent", "H3SaveConditioning", "H3LoadConditioning",
                     "H3SaveAVLatent", "H3LoadAVLatent"):
            cls = NODE_CLASS_MAPPINGS[name]
            self.assertTrue(callable(getattr(cls(), cls.FUNCTION)))
            self.assertIn("required", cls.INPUT_TYPES())
        self.assertIn("filename_prefix", nodes.H3SaveAVLatent.INPUT_TYPES()["required"])
        self.assertIn("samples", nodes.H3SaveAVLatent.INPUT_TYPES()["required"])
        self.assertIn("path", nodes.H3LoadAVLatent.INPUT_TYPES()["required"])
        self.assertTrue(nodes.H3SaveLatent.OUTPUT_NODE and nodes.H3SaveConditioning.OUTPUT_NODE)


if __name__ == "__main__":
    unittest.main()
