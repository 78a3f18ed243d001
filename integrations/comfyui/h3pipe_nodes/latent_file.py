"""The h3pipe latent file (docs/latent.md): write version 2; read version 2, version 1 and
ComfyUI's own `.latent` (core SaveLatent).

`LatentFile` is what crosses the split: the video tensor, an optional audio tensor, how ComfyUI
carried them (`layout`), the profile and job geometry it was checked against, and the scalar keys
of the LATENT dicts.
"""
import json
from dataclasses import dataclass, field
from typing import Optional

import torch

from . import profiles
from . import safetensors_io as st
from .profiles import Geometry, ShapeError

FORMAT = "h3latent"
VERSION = "2"
LAYOUTS = ("video", "video+audio", "av_nested")
COMFY_TENSOR = "latent_tensor"
COMFY_VERSION_MARK = "latent_format_version_0"
STORABLE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
UNKNOWN = Geometry(0, 0, 0, 0)  # written when the writer was not told the geometry


class LatentError(ValueError):
    """A latent that cannot be written or read; `code` is h3pipe's error code."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.reason = message


@dataclass
class LatentFile:
    video: torch.Tensor
    audio: Optional[torch.Tensor] = None
    layout: str = "video"
    profile: str = "none"
    geometry: Geometry = UNKNOWN
    video_extra: dict = field(default_factory=dict)
    audio_extra: dict = field(default_factory=dict)
    source: str = "h3latent v2"  # or "h3latent v1", "comfyui .latent"


def check_values(name, t, consequence="the sampler diverged; nothing was written"):
    """Raises LatentError unless `t` is a dense F32/F16/BF16 tensor of finite values."""
    if not isinstance(t, torch.Tensor):
        raise LatentError("latent.type", f"{name} is a {type(t).__name__}, not a tensor")
    if t.layout != torch.strided or t.device.type == "meta":
        raise LatentError("latent.type", f"{name} is a {t.layout} tensor on device {t.device}: a "
                          "latent is a dense tensor with data (convert it first)")
    if t.dtype not in STORABLE:
        raise LatentError("latent.bad_dtype", f"{name} has dtype {t.dtype}: a latent is stored as "
                          "F32, F16 or BF16 (convert it first)")
    bad = ~torch.isfinite(t.detach().float())
    if bool(bad.any()):
        n = int(bad.sum())
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise LatentError("latent.nonfinite", f"{name} holds {n} NaN/Inf value(s), the first at "
                          f"index {first}: {consequence}")


def _shape(t):
    return None if t is None else tuple(int(d) for d in t.shape)


def resolve_profile(name, video, audio, geometry=None, fps=24):
    """(profile name, geometry) for a latent about to be written; raises LatentError."""
    try:
        if name in ("auto", "", None):
            p, g = profiles.auto(_shape(video), _shape(audio), fps)
            return p.name, g
        if name == "none":
            profiles.check_structure(_shape(video), _shape(audio))
            return "none", geometry or UNKNOWN
        if name not in profiles.BY_NAME:
            raise LatentError("latent.profile", f"unknown latent profile \"{name}\" (built in: "
                              f"{', '.join(profiles.NAMES)}; or \"auto\", \"none\")")
        p = profiles.BY_NAME[name]
        return p.name, profiles.fit(p, _shape(video), _shape(audio), geometry, fps)
    except ShapeError as e:
        raise LatentError(e.code, e.reason)


def check_expected(lf, profile, geometry=None, fps=24):
    """What h3pipe's reader requires of a job's latent (common/latent/check.cpp), for a file read:
    a version 2 file names the job's profile (a version 1 file is `builtin`), its shapes are what
    the profile makes for the job and, given the job, its metadata names that job. A ComfyUI
    .latent names no profile: its shapes are checked. Raises LatentError with h3pipe's codes."""
    if lf.source == "h3latent v1" and profile != "builtin":
        raise LatentError("latent.profile", "a version 1 latent holds the builtin profile's grid; "
                          f"the job's profile is {profile}")
    if lf.source == "h3latent v2" and lf.profile != profile:
        raise LatentError("latent.profile", f"latent was made for profile {lf.profile}, the job's "
                          f"profile is {profile}")
    try:
        profiles.fit(profiles.BY_NAME[profile], _shape(lf.video), _shape(lf.audio), geometry, fps)
    except ShapeError as e:
        raise LatentError(e.code, e.reason)
    if geometry is not None and lf.source == "h3latent v2" and lf.geometry != geometry:
        raise LatentError("latent.geometry", f"latent metadata says job {lf.geometry}, the job is "
                          f"{geometry}")


def _jsonable(v):
    if v is None or isinstance(v, (bool, int, str)):
        return True
    if isinstance(v, float):
        return v == v and v not in (float("inf"), float("-inf"))
    if isinstance(v, (list, tuple)):
        return all(_jsonable(x) for x in v)
    return False


def extra_of(latent):
    """The LATENT dict's keys besides "samples" that JSON can carry (tensors such as noise_mask
    are not kept: they steer sampling, which is over once a latent is saved)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in latent.items()
            if k != "samples" and _jsonable(v)}


def encode(lf):
    """The v2 file's bytes for `lf`, after the value checks."""
    if lf.layout not in LAYOUTS:
        raise LatentError("latent.layout", f"layout \"{lf.layout}\" is not one of {LAYOUTS}")
    if (lf.audio is None) != (lf.layout == "video"):
        raise LatentError("latent.layout", f"layout {lf.layout} with"
                          f"{'out' if lf.audio is None else ''} an audio tensor")
    tensors = {"video": lf.video}
    if lf.audio is not None:
        tensors["audio"] = lf.audio
    for name, t in tensors.items():
        check_values(name, t)
    g = lf.geometry
    meta = {
        "h3pipe.format": FORMAT,
        "h3pipe.format_version": VERSION,
        "h3pipe.profile": lf.profile,
        "h3pipe.width": str(int(g.width)),
        "h3pipe.height": str(int(g.height)),
        "h3pipe.frames": str(int(g.frames)),
        "h3pipe.fps": str(int(g.fps)),
        "h3pipe.layout": lf.layout,
        "writer": "h3pipe_nodes",
    }
    if lf.video_extra:
        meta["h3pipe.comfy.video_extra"] = json.dumps(lf.video_extra, sort_keys=True)
    if lf.audio_extra:
        meta["h3pipe.comfy.audio_extra"] = json.dumps(lf.audio_extra, sort_keys=True)
    return st.encode(tensors, meta)


def _tensor_set(tensors, required, allowed, what):
    for name in required:
        if name not in tensors:
            raise LatentError("latent.missing_tensor", f"{what}: tensor \"{name}\" is missing")
    for name in tensors:
        if name not in allowed:
            raise LatentError("latent.unexpected_tensor", f"{what}: tensor \"{name}\" is not "
                              f"allowed (only {', '.join(allowed)})")


def _int_meta(meta, key):
    """A decimal uint32, as h3pipe writes and reads them: digits only."""
    v = meta.get(key)
    if v is None or not (v.isascii() and v.isdigit()) or len(v) > 10 or int(v) >= 1 << 32:
        raise LatentError("latent.metadata", f"metadata {key} must be a decimal integer, got "
                          + ("nothing" if v is None else f"\"{v}\""))
    return int(v)


def _extra_meta(meta, key):
    if key not in meta:
        return {}
    try:
        v = json.loads(meta[key])
    except ValueError:
        v = None
    if not isinstance(v, dict):
        raise LatentError("latent.metadata", f"metadata {key}: expected a JSON object")
    v.pop("samples", None)
    return v


def _check(profile, video, audio, geometry):
    """Shape check of a file read: against its built-in profile, or structure only."""
    try:
        if profile in profiles.BY_NAME:  # the file must agree with itself
            profiles.fit(profiles.BY_NAME[profile], _shape(video), _shape(audio), geometry)
        else:  # "none" or a profile declared in a cluster config: h3pipe checks it there
            profiles.check_structure(_shape(video), _shape(audio))
    except ShapeError as e:
        raise LatentError(e.code, e.reason)


def _decode_v2(tensors, meta):
    if meta.get("h3pipe.format") != FORMAT:
        raise LatentError("latent.metadata", f"metadata h3pipe.format must be \"{FORMAT}\", got "
                          f"\"{meta.get('h3pipe.format', '')}\"")
    profile = meta.get("h3pipe.profile", "")
    if not profile:
        raise LatentError("latent.metadata", "metadata h3pipe.profile is missing or empty")
    g = Geometry(*(_int_meta(meta, f"h3pipe.{k}") for k in ("width", "height", "frames", "fps")))
    layout = meta.get("h3pipe.layout")
    if layout not in LAYOUTS:
        raise LatentError("latent.metadata", f"metadata h3pipe.layout is "
                          f"{'missing' if layout is None else repr(layout)}: expected one of "
                          f"{', '.join(LAYOUTS)}")
    _tensor_set(tensors, ["video"], ["video", "audio"], "a version 2 latent")
    if (layout != "video") != ("audio" in tensors):
        raise LatentError("latent.missing_tensor" if layout != "video" else "latent.unexpected_tensor",
                          f"layout {layout} {'needs' if layout != 'video' else 'has no'} an audio "
                          f"tensor, the file holds {'one' if 'audio' in tensors else 'none'}")
    audio = tensors.get("audio")
    if audio is not None and (audio.dim() == 0 or audio.numel() == 0):
        raise LatentError("latent.geometry", f"audio has shape {_shape(audio)}: no samples")
    _check(profile, tensors["video"], audio, g)
    return LatentFile(tensors["video"], audio, layout, profile, g,
                      _extra_meta(meta, "h3pipe.comfy.video_extra"),
                      _extra_meta(meta, "h3pipe.comfy.audio_extra"), "h3latent v2")


def _decode_v1(tensors):
    _tensor_set(tensors, ["video", "audio"], ["video", "audio"], "version 1 latent")
    v, a = _shape(tensors["video"]), _shape(tensors["audio"])
    try:
        profiles.check_structure(v, a)
        if len(a) != 4 or a[0] != 1 or a[2] != 2:
            raise ShapeError(f"audio has shape {a}: version 1 latents have (1, C, 2, L)")
    except ShapeError as e:
        raise LatentError(e.code, e.reason)
    return LatentFile(tensors["video"], tensors["audio"], "video+audio", "builtin", UNKNOWN,
                      {}, {}, "h3latent v1")


def _decode_comfy(tensors):
    if COMFY_TENSOR not in tensors:
        raise LatentError("latent.missing_tensor", f"ComfyUI latent has no \"{COMFY_TENSOR}\" tensor")
    if COMFY_VERSION_MARK not in tensors:
        raise LatentError("latent.legacy", f"a ComfyUI latent without {COMFY_VERSION_MARK}"
                          " is a legacy SD1 latent (LoadLatent rescales it by 1/0.18215); "
                          "save it again with a current SaveLatent")
    if tensors[COMFY_VERSION_MARK].numel() != 0:
        raise LatentError("latent.header_schema", f"tensor {COMFY_VERSION_MARK} must be empty "
                          f"(shape [0]), got {_shape(tensors[COMFY_VERSION_MARK])}")
    _tensor_set(tensors, [COMFY_TENSOR], [COMFY_TENSOR, COMFY_VERSION_MARK], "a ComfyUI latent")
    try:
        profiles.check_structure(_shape(tensors[COMFY_TENSOR]))
    except ShapeError as e:
        raise LatentError(e.code, e.reason)
    return LatentFile(tensors[COMFY_TENSOR], None, "video", "none", UNKNOWN, {}, {},
                      "comfyui .latent")


def decode(data):
    """A LatentFile from a file's bytes (any supported form). Raises LatentError."""
    try:
        tensors, meta = st.decode(data)
    except st.FormatError as e:
        raise LatentError(e.code, e.reason)
    if COMFY_TENSOR in tensors or COMFY_VERSION_MARK in tensors:
        lf = _decode_comfy(tensors)
    else:
        version = meta.get("h3pipe.format_version")
        if version is None:
            lf = _decode_v1(tensors)
        elif version == VERSION:
            lf = _decode_v2(tensors, meta)
        else:
            raise LatentError("latent.version", f"metadata h3pipe.format_version is \"{version}\"; "
                              "this reader knows versions 1 (no key) and 2")
    for name, t in (("video", lf.video), ("audio", lf.audio)):
        if t is not None:
            check_values(name, t, "the file holds a diverged latent")
    return lf
