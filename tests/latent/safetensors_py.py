"""A small, independent safetensors reader/writer (numpy only), written from the published format
description (huggingface/safetensors README, "Format"), not from h3pipe's C++ code:

  * 8 bytes: N, an unsigned little-endian 64-bit integer, the size of the header;
  * N bytes: a UTF-8 JSON object, starting with '{', that may be padded at the end with spaces
    (0x20).  Each key is a tensor name mapping to {"dtype", "shape", "data_offsets": [BEGIN, END]}
    where the offsets are relative to the start of the byte buffer; the special key "__metadata__"
    maps strings to strings;
  * the byte buffer: little-endian, row-major; it must be entirely indexed, without holes;
    duplicate keys are not allowed.

Used by tests/latent/interop.py to check that files written by h3pipe open in other tools and that
h3pipe reads files written by other tools.
"""
import json
import struct

import numpy as np

_NUMPY = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8")}
_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key in header")
    return dict(pairs)


def read(path):
    """Returns ({name: (dtype_str, shape_tuple, float32 ndarray)}, metadata dict, header length)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("file shorter than the header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError("header runs past the end of the file")
    raw = blob[8:8 + n]
    if raw[:1] != b"{":
        raise ValueError("header does not start with '{'")
    header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    buf = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    for k, v in metadata.items():
        if not isinstance(v, str):
            raise ValueError("metadata value %r is not a string" % k)
    spans = []
    out = {}
    for name, info in header.items():
        dtype, shape = info["dtype"], tuple(info["shape"])
        begin, end = info["data_offsets"]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * _SIZE[dtype]:
            raise ValueError("tensor %s: span does not match shape" % name)
        data = buf[begin:end]
        if dtype == "BF16":
            arr = (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(data, dtype=_NUMPY[dtype]).astype(np.float32)
        out[name] = (dtype, shape, arr.reshape(shape))
        spans.append((begin, end))
    spans.sort()
    at = 0
    for begin, end in spans:
        if begin != at:
            raise ValueError("byte buffer has a hole or an overlap at %d" % begin)
        at = end
    if at != len(buf):
        raise ValueError("byte buffer not entirely indexed (%d of %d)" % (at, len(buf)))
    return out, metadata, n


def _bf16_bits(arr):
    """float32 -> bfloat16 bit patterns, rounding to nearest even."""
    bits = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2")


def write(path, tensors, metadata=None, dtype="F32", order=None):
    """tensors: {name: float ndarray}; written in `order` (default: sorted names)."""
    names = order or sorted(tensors)
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    chunks = []
    at = 0
    for name in names:
        arr = np.ascontiguousarray(tensors[name], dtype=np.float32)
        if dtype == "BF16":
            data = _bf16_bits(arr.ravel()).tobytes()
        else:
            data = arr.astype(_NUMPY[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [at, at + len(data)]}
        chunks.append(data)
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
