"""ComfyUI CONDITIONING <-> one safetensors file, so encode can run as its own stage.

CONDITIONING is a list of [tensor, dict] pairs; the dict holds tensors (pooled_output, ...),
lists of tensors (reference_latents) and scalars. Tensors are stored as `cond.I.tensor` and
`cond.I.KEY` (`cond.I.KEY.J` for list items); everything else, and the structure, is JSON in
the metadata key `h3pipe.conditioning`. h3pipe reads conditioning with its latent reader
(F32/F16/BF16 only), so other dtypes (an int64 mask) are stored as F32 and converted back on load.

Metadata: h3pipe.format = h3cond, h3pipe.cond_version = 1 (not h3pipe.format_version: h3pipe
takes a file with that key for a latent), h3pipe.conditioning = JSON list, one entry per pair:
{"tensor": REF, "options": {KEY: VALUE}}, where a VALUE is a JSON scalar, {"tensor": REF},
{"list": [VALUE, ...]} or {"dict": {KEY: VALUE}}, and REF is
{"name": TENSOR_NAME, "dtype": "torch.int64"} (dtype only when converted).
"""
import json

import torch

from . import safetensors_io as st
from .latent_file import LatentError

FORMAT = "h3cond"
VERSION = "1"
NATIVE = (torch.float32, torch.float16, torch.bfloat16)
CONVERTIBLE = {str(d): d for d in (torch.float64, torch.int64, torch.int32, torch.int16,
                                   torch.int8, torch.uint8, torch.bool)}


class _Writer:
    def __init__(self):
        self.tensors = {}

    def tensor(self, name, t):
        if name in self.tensors:
            raise LatentError("cond.key", f"conditioning key {name} occurs twice")
        ref = {"name": name}
        t = t.detach().to("cpu")
        if t.dtype not in NATIVE:
            if str(t.dtype) not in CONVERTIBLE:
                raise LatentError("cond.dtype", f"{name} has dtype {t.dtype}, which cannot be saved")
            ref["dtype"] = str(t.dtype)
            t = t.to(torch.float32)
        if not bool(torch.isfinite(t.float()).all()):
            raise LatentError("latent.nonfinite", f"{name} holds NaN/Inf values: nothing was written")
        self.tensors[name] = t
        return {"tensor": ref}

    def value(self, name, v):
        if isinstance(v, torch.Tensor):
            return self.tensor(name, v)
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                raise LatentError("cond.value", f"{name} = {v}: not a finite number")
            return v
        if isinstance(v, (list, tuple)):
            return {"list": [self.value(f"{name}.{j}", x) for j, x in enumerate(v)]}
        if isinstance(v, dict):
            for k in v:
                if not isinstance(k, str) or "." in k:
                    raise LatentError("cond.key", f"{name}: key {k!r} must be a string without '.'")
            return {"dict": {k: self.value(f"{name}.{k}", x) for k, x in v.items()}}
        raise LatentError("cond.value", f"{name} is a {type(v).__module__}.{type(v).__name__}, "
                          "which a conditioning file cannot hold (hooks, control nets and other "
                          "objects belong to the sampling stage)")


def encode(conditioning):
    """The file's bytes for a CONDITIONING value. Raises LatentError naming the bad entry."""
    if not isinstance(conditioning, (list, tuple)) or not conditioning:
        raise LatentError("cond.type", "CONDITIONING must be a non-empty list of [tensor, dict]")
    w, pairs = _Writer(), []
    for i, pair in enumerate(conditioning):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                and isinstance(pair[0], torch.Tensor) and isinstance(pair[1], dict)):
            raise LatentError("cond.type", f"conditioning entry {i} is not a [tensor, dict] pair")
        entry = {"tensor": w.tensor(f"cond.{i}.tensor", pair[0])["tensor"]}
        opts = {}
        for k, v in pair[1].items():
            if not isinstance(k, str) or "." in k or k == "tensor":
                raise LatentError("cond.key", f"conditioning entry {i}: key {k!r} must be a "
                                  "string without '.', other than \"tensor\"")
            opts[k] = w.value(f"cond.{i}.{k}", v)
        entry["options"] = opts
        pairs.append(entry)
    meta = {"h3pipe.format": FORMAT, "h3pipe.cond_version": VERSION,
            "h3pipe.conditioning": json.dumps(pairs, separators=(",", ":")),
            "writer": "h3pipe_nodes"}
    return st.encode(w.tensors, meta)


def _restore(ref, tensors, used):
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
        raise LatentError("cond.structure", f"bad tensor reference {ref!r}")
    name = ref["name"]
    if name not in tensors:
        raise LatentError("latent.missing_tensor", f"conditioning names tensor {name}, which the "
                          "file lacks")
    used.add(name)
    t = tensors[name]
    if "dtype" in ref:
        if ref["dtype"] not in CONVERTIBLE:
            raise LatentError("cond.structure", f"{name}: unknown dtype {ref['dtype']!r}")
        t = t.to(CONVERTIBLE[ref["dtype"]])
    return t


def _value(v, tensors, used):
    if isinstance(v, dict):
        if set(v) == {"tensor"}:
            return _restore(v["tensor"], tensors, used)
        if set(v) == {"list"} and isinstance(v["list"], list):
            return [_value(x, tensors, used) for x in v["list"]]
        if set(v) == {"dict"} and isinstance(v["dict"], dict):
            return {k: _value(x, tensors, used) for k, x in v["dict"].items()}
        raise LatentError("cond.structure", f"unexpected value {json.dumps(v)[:80]}")
    return v


def decode(data):
    """The CONDITIONING value of a file's bytes. Raises LatentError."""
    try:
        tensors, meta = st.decode(data)
    except st.FormatError as e:
        raise LatentError(e.code, e.reason)
    if meta.get("h3pipe.format") != FORMAT:
        raise LatentError("cond.format", f"metadata h3pipe.format = "
                          f"\"{meta.get('h3pipe.format', '')}\": not an h3pipe conditioning file")
    if meta.get("h3pipe.cond_version") != VERSION:
        raise LatentError("cond.format", f"conditioning format version "
                          f"\"{meta.get('h3pipe.cond_version')}\": this reader knows {VERSION}")
    try:
        pairs = json.loads(meta.get("h3pipe.conditioning", ""))
    except ValueError:
        raise LatentError("cond.structure", "metadata h3pipe.conditioning is not JSON")
    if not isinstance(pairs, list) or not pairs:
        raise LatentError("cond.structure", "metadata h3pipe.conditioning: expected a list")
    used, out = set(), []
    for i, e in enumerate(pairs):
        if not isinstance(e, dict) or set(e) != {"tensor", "options"} or \
                not isinstance(e["options"], dict):
            raise LatentError("cond.structure", f"conditioning entry {i}: expected "
                              "{\"tensor\", \"options\"}")
        out.append([_restore(e["tensor"], tensors, used),
                    {k: _value(v, tensors, used) for k, v in e["options"].items()}])
    extra = sorted(set(tensors) - used)
    if extra:
        raise LatentError("latent.unexpected_tensor", f"tensors not named by the structure: "
                          f"{', '.join(extra)}")
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t.float()).all()):
            raise LatentError("latent.nonfinite", f"{name} holds NaN/Inf values")
    return out
