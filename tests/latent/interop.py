#!/usr/bin/python3
"""Interop driver for latent_test: `check FILE T H W L DTYPE` verifies a file written by h3pipe
with the independent reader; `write FILE T H W L DTYPE` writes one (version 1) for h3pipe to read.
Version 2 and ComfyUI forms (docs/latent.md), video only, for a Wan 2.1 job of 64x48, 9 frames at
16 fps (video (1, 16, 3, 6, 8)): `check-v2 FILE DTYPE` / `write-v2 FILE DTYPE`, and
`check-comfy FILE` / `write-comfy FILE` (as ComfyUI's SaveLatent writes it through safetensors:
`latent_format_version_0`, an empty F32 tensor, then `latent_tensor`, sorted by name).  Values
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


WAN_VIDEO = (1, 16, 3, 6, 8)
WAN_META = {"h3pipe.format": "h3latent", "h3pipe.format_version": "2", "h3pipe.profile": "wan2.1",
            "h3pipe.width": "64", "h3pipe.height": "48", "h3pipe.frames": "9", "h3pipe.fps": "16",
            "h3pipe.layout": "video"}


def wan_video():
    return pattern(int(np.prod(WAN_VIDEO)), 7, 1001, 500, 64.0).reshape(WAN_VIDEO)


def same(name, got, ref):
    if not np.array_equal(got, ref):
        bad = np.argwhere(got != ref)[0]
        raise AssertionError("%s differs at %s: %r vs %r" % (name, bad, got[tuple(bad)],
                                                            ref[tuple(bad)]))


def v2_and_comfy(cmd, path, dtype):
    if cmd == "write-v2":
        st.write(path, {"video": wan_video()}, dict(WAN_META, writer="numpy"), dtype)
    elif cmd == "write-comfy":
        st.write(path, {"latent_tensor": wan_video(),
                        "latent_format_version_0": np.zeros((0,), dtype=np.float32)},
                 {"prompt": "{\"3\": {\"class_type\": \"KSampler\"}}"}, "F32")
    elif cmd == "check-v2":
        tensors, meta, _ = st.read(path)
        assert sorted(tensors) == ["video"], sorted(tensors)
        for k, v in WAN_META.items():
            assert meta.get(k) == v, (k, meta.get(k), v)
        got_dtype, shape, got = tensors["video"]
        assert (got_dtype, shape) == (dtype, WAN_VIDEO), (got_dtype, shape)
        ref = wan_video()
        if dtype == "BF16":
            ref = (st._bf16_bits(ref.ravel()).astype(np.uint32) << 16).view(np.float32).reshape(ref.shape)
        same("video", got, ref)
    elif cmd == "check-comfy":
        with open(path, "rb") as f:
            blob = f.read()
        n = int.from_bytes(blob[:8], "little")
        header = blob[8:8 + n].decode("utf-8")
        # safetensors' serde order: __metadata__, then tensors sorted by dtype and name.
        assert header.index("__metadata__") < header.index("latent_format_version_0") < \
            header.index("latent_tensor"), header
        tensors, meta, _ = st.read(path)
        assert sorted(tensors) == ["latent_format_version_0", "latent_tensor"], sorted(tensors)
        assert tensors["latent_format_version_0"][:2] == ("F32", (0,)), tensors["latent_format_version_0"][:2]
        got_dtype, shape, got = tensors["latent_tensor"]
        assert (got_dtype, shape) == ("F32", WAN_VIDEO), (got_dtype, shape)
        same("latent_tensor", got, wan_video())
    else:
        raise SystemExit("unknown command " + cmd)
    print("interop ok:", cmd, path, dtype)
    return 0


def main():
    if sys.argv[1] in ("write-v2", "check-v2", "write-comfy", "check-comfy"):
        return v2_and_comfy(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "F32")
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
