#!/usr/bin/python3
"""Interop driver for latent_test: `check FILE T H W L DTYPE` verifies a file written by h3pipe
with the independent reader; `write FILE T H W L DTYPE` writes one for h3pipe to read.  Values
follow a formula both sides compute exactly (see latent_test.cpp, pattern())."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py as st  # noqa: E402


def pattern(n, mul, mod, off, div):
    i = np.arange(n, dtype=np.int64)
    return (((i * mul) % mod - off) / div).astype(np.float32)


def expected(t, h, w, l):
    video = pattern(24 * t * h * w, 7, 1001, 500, 64.0).reshape(1, 24, t, h, w)
    audio = pattern(32 * 2 * l, 13, 777, 388, 32.0).reshape(1, 32, 2, l)
    return {"video": video, "audio": audio}


def main():
    cmd, path, t, h, w, l, dtype = sys.argv[1:8]
    want = expected(int(t), int(h), int(w), int(l))
    if cmd == "write":
        # audio first: a reader must follow data_offsets, not the order of the keys
        st.write(path, want, {"writer": "numpy", "note": "written by safetensors_py"}, dtype,
                 order=["audio", "video"])
        return 0
    tensors, meta, header_len = st.read(path)
    assert header_len % 8 == 0, "header not padded to a multiple of 8: %d" % header_len
    assert sorted(tensors) == ["audio", "video"], sorted(tensors)
    assert meta.get("writer") == "h3pipe", meta
    for name, arr in want.items():
        got_dtype, shape, got = tensors[name]
        assert got_dtype == dtype, (name, got_dtype)
        assert shape == arr.shape, (name, shape, arr.shape)
        if dtype == "BF16":
            ref = (st._bf16_bits(arr.ravel()).astype(np.uint32) << 16).view(np.float32)
            ref = ref.reshape(arr.shape)
        else:
            ref = arr
        if not np.array_equal(got, ref):
            bad = np.argwhere(got != ref)[0]
            raise AssertionError("%s differs at %s: %r vs %r" % (name, bad, got[tuple(bad)],
                                                                ref[tuple(bad)]))
    print("interop ok:", path, dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
