"""The pack's safetensors reader/writer: the reference byte layout, and the same verdict and error
code as h3pipe's C++ reader on the malformed-latent corpus (tests/fixtures/latent)."""
import json
import os
import struct
import unittest

import torch

import support  # noqa: F401  (sys.path)
from h3pipe_nodes import latent_file
from h3pipe_nodes import safetensors_io as st

CORPUS = os.path.join(support.HERE, "..", "..", "..", "tests", "fixtures", "latent")


class LayoutTest(unittest.TestCase):
    def test_reference_layout(self):
        t = {"b": torch.arange(6, dtype=torch.float32).reshape(2, 3),
             "a": torch.tensor([1.5, -2.0], dtype=torch.float16)}
        data = st.encode(t, {"k": "v"})
        (n,) = struct.unpack("<Q", data[:8])
        self.assertEqual(n % 8, 0)
        header = json.loads(data[8:8 + n])
        self.assertEqual(header["__metadata__"], {"k": "v"})
        # sorted by name, contiguous from 0, as safetensors.torch.save_file lays them out
        self.assertEqual(header["a"], {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]})
        self.assertEqual(header["b"], {"dtype": "F32", "shape": [2, 3], "data_offsets": [4, 28]})
        self.assertEqual(data[8 + n:8 + n + 4], struct.pack("<2e", 1.5, -2.0))
        self.assertEqual(data[8 + n + 4:], struct.pack("<6f", *range(6)))
        self.assertTrue(data[8:8 + n].endswith(b"}") or data[8:8 + n].rstrip(b" ").endswith(b"}"))

    def test_every_dtype_round_trips(self):
        t = {name: (torch.arange(5) - 2).to(dt) for name, (dt, _, _) in st.DTYPES.items()}
        got, meta = st.decode(st.encode(t), allowed_dtypes=tuple(st.DTYPES))
        self.assertEqual(meta, {})
        for name, v in t.items():
            self.assertEqual(got[name].dtype, v.dtype, name)
            self.assertTrue(torch.equal(got[name], v), name)

    def test_empty_tensor_and_no_metadata(self):
        got, meta = st.decode(st.encode({"e": torch.tensor([])}))
        self.assertEqual(tuple(got["e"].shape), (0,))


class CorpusTest(unittest.TestCase):
    def test_same_codes_as_the_cpp_reader(self):
        with open(os.path.join(CORPUS, "cases.json")) as f:
            cases = json.load(f)
        self.assertGreater(len(cases), 30)
        for name, want in sorted(cases.items()):
            with self.subTest(file=name):
                with open(os.path.join(CORPUS, name), "rb") as f:
                    data = f.read()
                try:
                    latent_file.decode(data)
                    code = "ok"
                except latent_file.LatentError as e:
                    code = e.code
                self.assertEqual(code, want["code"])


if __name__ == "__main__":
    unittest.main()
