"""A small, strict safetensors reader/writer (Debian 12 packages no `safetensors`).

Byte layout as the reference library writes it: an 8-byte little-endian header length N, N bytes
of JSON (padded with spaces to a multiple of 8), then the raw little-endian tensor data in
`data_offsets` order. Files written here open with `safetensors.torch.load_file`.

The reader takes hostile input: it checks the same things, in the same order and with the same
error codes, as h3pipe's C++ reader (common/latent/safetensors.cpp): header length cap, strict
JSON (no duplicate keys, no NUL, bounded nesting), entry schema, dtype, shape and size
arithmetic, data_offsets covering the data exactly, and string-only metadata.
"""
import json
import struct

import numpy as np
import torch

MAX_HEADER_BYTES = 1 << 20  # h3pipe's limit (the reference library allows 100 MB)
MAX_RANK = 8
MAX_TENSORS = 4096
MAX_JSON_DEPTH = 8

# name -> (torch dtype, bytes per element, numpy dtype of the raw little-endian words)
DTYPES = {
    "F64": (torch.float64, 8, "<f8"),
    "F32": (torch.float32, 4, "<f4"),
    "F16": (torch.float16, 2, "<f2"),
    "BF16": (torch.bfloat16, 2, "<i2"),
    "I64": (torch.int64, 8, "<i8"),
    "I32": (torch.int32, 4, "<i4"),
    "I16": (torch.int16, 2, "<i2"),
    "I8": (torch.int8, 1, "i1"),
    "U8": (torch.uint8, 1, "u1"),
    "BOOL": (torch.bool, 1, "?"),
}
LATENT_DTYPES = ("F32", "F16", "BF16")
DTYPE_NAMES = {torch_dtype: name for name, (torch_dtype, _, _) in DTYPES.items()}


class FormatError(ValueError):
    """A file that is not what it claims; `code` is h3pipe's error code (latent.*)."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.reason = message


def tensor_bytes(t):
    """The tensor's data as little-endian bytes (contiguous, on the CPU)."""
    if t.dtype not in DTYPE_NAMES:
        raise FormatError("latent.bad_dtype", f"dtype {t.dtype} cannot be stored")
    t = t.detach().to("cpu").contiguous().reshape(-1)
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().astype(DTYPES[DTYPE_NAMES[t.dtype]][2], copy=False).tobytes()


def encode(tensors, metadata=None):
    """The file's bytes: `tensors` (name -> torch tensor) laid out in sorted name order."""
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"metadata {k!r}: keys and values must be strings")
        header["__metadata__"] = dict(metadata)
    chunks, at = [], 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = tensor_bytes(t)
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": [int(d) for d in t.shape],
                        "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * (-len(text) % 8)
    if len(text) > MAX_HEADER_BYTES:
        raise FormatError("latent.header_too_large",
                          f"header of {len(text)} bytes exceeds the {MAX_HEADER_BYTES} byte limit")
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def _json_depth_ok(text):
    """False if arrays/objects nest deeper than MAX_JSON_DEPTH (strings skipped)."""
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise FormatError("latent.duplicate_key", f"header: duplicate key \"{k}\"")
        out[k] = v
    return out


def _reject_constant(name):
    raise FormatError("latent.header_json", f"header is not strict JSON: {name}")


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (1 << 64)


def parse_header(raw, data_len, allowed_dtypes=LATENT_DTYPES):
    """Checks the header bytes; returns (entries sorted by offset, metadata dict)."""
    if not raw or raw[0:1] != b"{":
        got = "nothing" if not raw else f"0x{raw[0]:02x}"
        raise FormatError("latent.header_start", f"header must start with '{{', got {got}")
    if b"\0" in raw:
        raise FormatError("latent.header_json",
                          f"header is not strict JSON: NUL byte at header offset {raw.index(0)}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError("latent.header_json", f"header is not UTF-8: {e.reason} at byte {e.start}")
    if not _json_depth_ok(text):
        raise FormatError("latent.header_json", f"header nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        root = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise FormatError("latent.header_json", f"header is not strict JSON at byte {e.pos}: {e.msg}")
    if not isinstance(root, dict):
        raise FormatError("latent.header_schema", "header must be a JSON object")
    if len(root) > MAX_TENSORS + 1:
        raise FormatError("latent.header_schema",
                          f"header lists {len(root)} entries, at most {MAX_TENSORS} allowed")
    meta = root.get("__metadata__")
    entries = []
    for name, v in root.items():  # stage 1: entry structure and dtype
        if name == "__metadata__":
            continue
        if not isinstance(v, dict):
            raise FormatError("latent.header_schema", f"tensor \"{name}\": entry must be an object")
        for field in v:
            if field not in ("dtype", "shape", "data_offsets"):
                raise FormatError("latent.header_schema",
                                  f"tensor \"{name}\": unknown field \"{field}\"")
        for field in ("dtype", "shape", "data_offsets"):
            if field not in v:
                raise FormatError("latent.header_schema",
                                  f"tensor \"{name}\": missing field \"{field}\"")
        if not isinstance(v["dtype"], str):
            raise FormatError("latent.header_schema", f"tensor \"{name}\": dtype must be a string")
        if v["dtype"] not in allowed_dtypes:
            raise FormatError("latent.bad_dtype", f"tensor \"{name}\": dtype \"{v['dtype']}\" not "
                              f"allowed ({', '.join(allowed_dtypes)})")
        entries.append((name, v))
    out = []
    for name, v in entries:  # stage 2: shape, byte size, offsets
        shape = v["shape"]
        if not isinstance(shape, list) or len(shape) > MAX_RANK:
            raise FormatError("latent.bad_shape",
                              f"tensor \"{name}\": shape must be an array of at most {MAX_RANK} sizes")
        elems = 1
        for d in shape:
            if not _is_uint(d):
                raise FormatError("latent.bad_shape", f"tensor \"{name}\": shape entries must be "
                                  f"non-negative integers, got {json.dumps(d)}")
            elems *= d
        size = DTYPES[v["dtype"]][1]
        if elems * size >= (1 << 64):
            raise FormatError("latent.shape_overflow",
                              f"tensor \"{name}\": shape {tuple(shape)} x {size} bytes overflows 64 bits")
        off = v["data_offsets"]
        if not (isinstance(off, list) and len(off) == 2 and _is_uint(off[0]) and _is_uint(off[1])):
            raise FormatError("latent.bad_offsets", f"tensor \"{name}\": data_offsets must be two "
                              "non-negative integers [begin, end]")
        begin, end = off
        if begin > end:
            raise FormatError("latent.bad_offsets",
                              f"tensor \"{name}\": data_offsets [{begin}, {end}] end before begin")
        if end - begin != elems * size:
            raise FormatError("latent.size_mismatch",
                              f"tensor \"{name}\": shape {tuple(shape)} {v['dtype']} needs "
                              f"{elems * size} bytes, data_offsets [{begin}, {end}] span {end - begin}")
        out.append({"name": name, "dtype": v["dtype"], "shape": list(shape), "begin": begin,
                    "end": end})
    out.sort(key=lambda t: (t["begin"], t["end"]))  # stage 3: exact coverage
    at, prev = 0, None
    for t in out:
        if t["begin"] < at:
            raise FormatError("latent.offsets_overlap", f"tensor \"{t['name']}\" [{t['begin']}, "
                              f"{t['end']}] overlaps tensor \"{prev['name']}\"")
        if t["begin"] > at:
            raise FormatError("latent.offsets_gap", f"hole of {t['begin'] - at} bytes in the data "
                              f"before tensor \"{t['name']}\" at {t['begin']}")
        at, prev = t["end"], t
    if at > data_len:
        raise FormatError("latent.offsets_past_eof", f"tensor \"{prev['name']}\" ends at data byte "
                          f"{at}, past the {data_len} bytes the file holds")
    if at < data_len:
        raise FormatError("latent.trailing_bytes", f"{data_len - at} bytes after the last tensor's "
                          f"data (tensors cover {at} of {data_len} bytes)")
    metadata = {}
    if meta is not None:
        if not isinstance(meta, dict):
            raise FormatError("latent.metadata_type", "__metadata__ must be an object of strings")
        for k, val in meta.items():
            if not isinstance(val, str):
                raise FormatError("latent.metadata_type",
                                  f"__metadata__ \"{k}\": value must be a string, got {type(val).__name__}")
            metadata[k] = val
    return out, metadata


def decode(data, allowed_dtypes=LATENT_DTYPES):
    """Parses a whole file's bytes; returns ({name: tensor}, metadata). Raises FormatError."""
    if len(data) < 8:
        raise FormatError("latent.too_short",
                          f"file holds {len(data)} bytes, less than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER_BYTES:
        raise FormatError("latent.header_too_large",
                          f"header length {n} exceeds the {MAX_HEADER_BYTES} byte limit")
    if n > len(data) - 8:
        raise FormatError("latent.header_past_eof", f"header length {n} runs past the end of the "
                          f"file ({len(data) - 8} bytes after the prefix)")
    entries, metadata = parse_header(bytes(data[8:8 + n]), len(data) - 8 - n, allowed_dtypes)
    body = memoryview(data)[8 + n:]
    tensors = {}
    for e in entries:
        torch_dtype, _, np_dtype = DTYPES[e["dtype"]]
        arr = np.frombuffer(body[e["begin"]:e["end"]], dtype=np_dtype).copy()
        t = torch.from_numpy(arr)
        if torch_dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        elif t.dtype != torch_dtype:
            t = t.to(torch_dtype)
        tensors[e["name"]] = t.reshape(e["shape"])
    return tensors, metadata
