"""H3SaveConditioning / H3LoadConditioning: CONDITIONING round trip and refusals."""
import os
import unittest

import torch

from support import ComfyDirsTest
from h3pipe_nodes import files, nodes
from h3pipe_nodes import safetensors_io as st


def cond_example():
    g = torch.Generator().manual_seed(3)
    return [
        [torch.randn(1, 77, 32, generator=g), {
            "pooled_output": torch.randn(1, 16, generator=g),
            "attention_mask": torch.tensor([[1, 1, 1, 0]], dtype=torch.int64),
            "reference_latents": [torch.randn(1, 16, 1, 4, 4, generator=g).half()],
            "guidance": 3.5, "start_percent": 0.0, "strength": 1, "name": "pos",
            "flag": True, "nothing": None, "area": (8, 8, 0, 0),
            "nested": {"scale": 2.0, "t": torch.randn(2, generator=g).to(torch.bfloat16)},
        }],
        [torch.randn(1, 12, 32, generator=g), {}],
    ]


def assert_same(test, a, b, where="cond"):
    if isinstance(a, torch.Tensor):
        test.assertIsInstance(b, torch.Tensor, where)
        test.assertEqual(a.dtype, b.dtype, where)
        test.assertTrue(torch.equal(a, b), where)
    elif isinstance(a, dict):
        test.assertEqual(sorted(a), sorted(b), where)
        for k in a:
            assert_same(test, a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        test.assertEqual(len(a), len(b), where)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(test, x, y, f"{where}.{i}")
    else:
        test.assertEqual(a, b, where)


class ConditioningTest(ComfyDirsTest):
    def save(self, cond, prefix="h3pipe/conditioning"):
        [ref] = nodes.H3SaveConditioning().save(cond, prefix)["ui"]["conditioning"]
        return ref, os.path.join(self.out, ref["subfolder"], ref["filename"])

    def test_round_trip_gives_an_equal_structure(self):
        cond = cond_example()
        ref, path = self.save(cond)
        self.assertTrue(ref["filename"].endswith("_00001_.safetensors"))
        with open(path, "rb") as f:
            tensors, meta = st.decode(f.read())
        self.assertIn("cond.0.tensor", tensors)
        self.assertIn("cond.0.pooled_output", tensors)
        self.assertIn("cond.0.reference_latents.0", tensors)
        self.assertEqual(tensors["cond.0.attention_mask"].dtype, torch.float32)  # h3pipe reads F32/F16/BF16
        self.assertEqual(meta["h3pipe.format"], "h3cond")
        (back,) = nodes.H3LoadConditioning().load(f"{ref['subfolder']}/{ref['filename']} [output]")
        cond[0][1]["area"] = list(cond[0][1]["area"])  # JSON has no tuples
        assert_same(self, cond, back)

    def test_objects_and_nan_are_refused_and_nothing_is_written(self):
        bad = [
            ([[torch.zeros(1, 2, 3), {"hooks": object()}]], "cond.value"),
            ([[torch.full((1, 2, 3), float("nan")), {}]], "latent.nonfinite"),
            ([[torch.zeros(1, 2, 3), {"pooled_output": torch.tensor([float("inf")])}]],
             "latent.nonfinite"),
            ([[torch.zeros(1, 2, 3), {"guidance": float("nan")}]], "cond.value"),
            ([], "cond.type"),
            ([[torch.zeros(1), "not a dict"]], "cond.type"),
        ]
        for cond, code in bad:
            with self.subTest(code=code):
                with self.assertRaises(nodes.NodeError) as cm:
                    self.save(cond)
                self.assertEqual(cm.exception.code, code)
                self.assertTrue(str(cm.exception).startswith("H3SaveConditioning: "))
                self.assertEqual(self.files_under(), [])

    def test_sidecar_is_checked(self):
        _, path = self.save(cond_example())
        self.assertEqual(files.read_sidecar(path), files.sha256_file(path))
        with open(path, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            f.write(b"\x00")
        with self.assertRaises(nodes.NodeError) as cm:
            nodes.H3LoadConditioning().load(path)
        self.assertEqual(cm.exception.code, "artifact.mismatch")

    def test_a_latent_is_not_conditioning(self):
        data = st.encode({"video": torch.zeros(1, 16, 1, 2, 2)}, {"h3pipe.format": "h3latent"})
        files.publish_with_sidecar(os.path.join(self.inp, "x.safetensors"), data)
        with self.assertRaisesRegex(nodes.NodeError, "cond.format"):
            nodes.H3LoadConditioning().load("x.safetensors")


if __name__ == "__main__":
    unittest.main()
