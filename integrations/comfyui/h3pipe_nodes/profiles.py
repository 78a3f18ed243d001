"""The built-in latent profiles of docs/latent.md, and the shape checks against them.

A profile says what latent a model makes for a job of W x H, F frames at fps:
    C = channels, T' = (F - 1) / temporal + 1, H' = H / spatial, W' = W / spatial
plus an optional audio rule. `check` raises ShapeError (code latent.geometry) naming the tensor,
the axis and what the profile expects.
"""
from dataclasses import dataclass
from typing import Optional


class ShapeError(ValueError):
    def __init__(self, message, code="latent.geometry"):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.reason = message


@dataclass(frozen=True)
class Profile:
    name: str
    models: str
    channels: int
    temporal: int
    spatial: int
    any_frames: bool  # True: any F >= 1 with T' = floor((F-1)/temporal)+1; False: F = k*temporal+1
    multiple: int  # W and H must be multiples of this
    audio: Optional[str] = None  # None, "builtin" or "ltx2"

    def frames_ok(self, f):
        return f >= 1 and (self.any_frames or (f - 1) % self.temporal == 0)

    def frame_rule(self):
        return "any F >= 1" if self.any_frames else f"{self.temporal}k+1"

    def video_shape(self, g):
        return (1, self.channels, (g.frames - 1) // self.temporal + 1, g.height // self.spatial,
                g.width // self.spatial)

    def audio_lengths(self, g):
        """The audio lengths the profile accepts for geometry g (empty without an audio rule)."""
        # integer ceilings, as h3pipe computes them: ceil(F * rate / (fps * divisor))
        if self.audio == "builtin":
            return [-(-(g.frames * 48000) // (g.fps * 86))]
        if self.audio == "ltx2":
            n = -(-(g.frames * 25) // g.fps)
            return [n - 1, n, n + 1]
        return []

    def audio_shape(self, length):
        if self.audio == "builtin":
            return (1, 32, 2, length)
        if self.audio == "ltx2":
            return (1, 8, length, 16)
        return None

    def audio_rule(self):
        return {"builtin": "(1, 32, 2, L)", "ltx2": "(1, 8, L, 16)"}.get(self.audio, "none")

    def audio_length_of(self, shape):
        """L from an audio shape that fits this profile's rule apart from L, else None."""
        shape = tuple(shape)
        if self.audio == "builtin" and len(shape) == 4 and shape[:3] == (1, 32, 2):
            return shape[3]
        if self.audio == "ltx2" and len(shape) == 4 and shape[:2] == (1, 8) and shape[3] == 16:
            return shape[2]
        return None


@dataclass(frozen=True)
class Geometry:
    width: int
    height: int
    frames: int
    fps: int

    def __str__(self):
        return f"{self.width}x{self.height}x{self.frames}@{self.fps}"


BUILTIN = [
    Profile("builtin", "h3pipe's builtin model; the seeds' MiniMax H3 grid", 24, 4, 16, True, 16,
            "builtin"),
    Profile("wan2.1", "Wan 2.1, Wan 2.2 14B (Wan 2.1 VAE)", 16, 4, 8, False, 16),
    Profile("wan2.2-5b", "Wan 2.2 TI2V 5B (Wan 2.2 VAE)", 48, 4, 16, False, 32),
    Profile("hunyuanvideo", "HunyuanVideo", 16, 4, 8, False, 16),
    Profile("ltxv", "LTX-Video", 128, 8, 32, False, 32),
    Profile("mochi", "Mochi", 12, 6, 8, False, 16),
    Profile("ltx2", "LTX-2 (audio + video)", 128, 8, 32, False, 32, "ltx2"),
]
BY_NAME = {p.name: p for p in BUILTIN}
NAMES = [p.name for p in BUILTIN]


def _fmt(shape):
    return "(" + ", ".join(str(int(d)) for d in shape) + ")"


def check_structure(video_shape, audio_shape=None):
    """What holds for every h3pipe latent: video rank 5 with batch 1."""
    if len(video_shape) != 5:
        raise ShapeError(f"video has shape {_fmt(video_shape)}: expected rank 5 "
                         "(1, C, T', H', W'), a video model's latent")
    if video_shape[0] != 1:
        raise ShapeError(f"video has batch {video_shape[0]} in {_fmt(video_shape)}: expected 1 "
                         "(one job, one latent)")
    if audio_shape is not None and len(audio_shape) == 0:
        raise ShapeError("audio is a scalar: expected a tensor with a batch axis")


def fit(profile, video_shape, audio_shape, geometry=None, fps=24):
    """Checks the shapes against `profile`; returns the job geometry (derived when not given).

    With `geometry` the shapes must be exactly what the profile makes for it. Without, W, H and F
    are derived from the latent (F from T' and, for the builtin audio rule, from L)."""
    p = profile
    check_structure(video_shape, audio_shape)
    c = video_shape[1]
    if c != p.channels:
        raise ShapeError(f"video has {c} channels in {_fmt(video_shape)}: profile {p.name} "
                         f"({p.models}) has {p.channels}")
    if p.audio is None and audio_shape is not None:
        raise ShapeError(f"an audio latent {_fmt(audio_shape)} was given but profile {p.name} "
                         "has no audio")
    if p.audio is not None and audio_shape is None:
        raise ShapeError(f"profile {p.name} needs an audio latent "
                         f"{p.audio_rule()}; none was given")
    if geometry is not None:
        g = geometry
        for axis, v in (("width", g.width), ("height", g.height)):
            if v <= 0 or v % p.multiple:
                raise ShapeError(f"{axis} {v} is not a positive multiple of {p.multiple} "
                                 f"(profile {p.name})")
        if not p.frames_ok(g.frames):
            raise ShapeError(f"frames {g.frames} does not fit profile {p.name}'s frame rule "
                             f"{p.frame_rule()}")
        if g.fps <= 0:
            raise ShapeError(f"fps {g.fps} must be positive")
        want = p.video_shape(g)
        if tuple(video_shape) != want:
            raise ShapeError(f"video has shape {_fmt(video_shape)}: profile {p.name} makes "
                             f"{_fmt(want)} for {g}")
        if p.audio is not None:
            lengths = p.audio_lengths(g)
            if p.audio_length_of(audio_shape) not in lengths:
                want_a = " or ".join(_fmt(p.audio_shape(n)) for n in lengths)
                raise ShapeError(f"audio has shape {_fmt(audio_shape)}: profile {p.name} makes "
                                 f"{want_a} for {g}")
        return g
    t, h, w = video_shape[2], video_shape[3], video_shape[4]
    if min(t, h, w) < 1:
        raise ShapeError(f"video has an empty axis in {_fmt(video_shape)}")
    width, height = w * p.spatial, h * p.spatial
    if width % p.multiple or height % p.multiple:
        raise ShapeError(f"video {_fmt(video_shape)} gives {width}x{height}, not a multiple of "
                         f"{p.multiple} (profile {p.name})")
    if fps <= 0:
        raise ShapeError(f"fps {fps} must be positive")
    first = (t - 1) * p.temporal + 1
    candidates = range(first, first + p.temporal) if p.any_frames else [first]
    if p.audio is None:
        return Geometry(width, height, first, fps)
    length = p.audio_length_of(audio_shape)
    if length is None:
        raise ShapeError(f"audio has shape {_fmt(audio_shape)}: profile {p.name} expects "
                         f"{p.audio_rule()}")
    for f in candidates:
        g = Geometry(width, height, f, fps)
        if length in p.audio_lengths(g):
            return g
    raise ShapeError(f"audio length {length} fits no frame count of video {_fmt(video_shape)} at "
                     f"{fps} fps (profile {p.name}); give frames and fps")


def auto(video_shape, audio_shape, fps=24):
    """The first built-in profile (table order) the shapes fit, with its derived geometry."""
    check_structure(video_shape, audio_shape)
    tried = []
    for p in BUILTIN:
        try:
            return p, fit(p, video_shape, audio_shape, None, fps)
        except ShapeError as e:
            tried.append(f"{p.name}: {e.reason}")
    raise ShapeError(f"video {_fmt(video_shape)}"
                     + (f" with audio {_fmt(audio_shape)}" if audio_shape is not None else "")
                     + " fits no built-in latent profile; choose profile \"none\" to save it "
                     "without a profile check. Tried:\n  " + "\n  ".join(tried))
