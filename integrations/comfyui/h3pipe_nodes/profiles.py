"""The built-in latent profiles of docs/latent.md, and the shape checks against them.

The table is latent_profiles.json beside this file: the same file h3pipe's C++ readers, writers
and planner compile in, so the node pack and h3pipe cannot disagree on a profile. A profile says
what latent a model makes for a job of W x H, F frames at fps:
    k = (F - frame_offset) / temporal_factor    (exact for "strict", floored for "floor")
    T' = k * temporal_steps + latent_offset,  H' = H / spatial_factor,  W' = W / spatial_factor
    audio: the shape with L = F / fps * rate[0] / rate[1], rounded by "rounding" (+- tolerance)
`check` raises ShapeError (code latent.geometry) naming the tensor, the axis and what the profile
expects.
"""
import json
import os
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional, Tuple

TABLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "latent_profiles.json")


class ShapeError(ValueError):
    def __init__(self, message, code="latent.geometry"):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.reason = message


@dataclass(frozen=True)
class Audio:
    shape: Tuple  # sizes, with "L" for the length axis
    rate_num: int
    rate_den: int
    rounding: str = "ceil"  # or "nearest" (halves to even, Python's round)
    tolerance: int = 0

    def length(self, frames, fps):
        exact = Fraction(frames * self.rate_num, fps * self.rate_den)
        n = -(-exact.numerator // exact.denominator) if self.rounding == "ceil" else round(exact)
        return int(n)

    def with_length(self, n):
        return tuple(n if d == "L" else d for d in self.shape)

    def length_of(self, shape):
        """L from an audio shape that fits this rule apart from L, else None."""
        shape = tuple(shape)
        if len(shape) != len(self.shape):
            return None
        length = None
        for want, got in zip(self.shape, shape):
            if want == "L":
                length = got
            elif want != got:
                return None
        return length

    def describe(self):
        return "(" + ", ".join(str(d) for d in self.shape) + ")"


@dataclass(frozen=True)
class Geometry:
    width: int
    height: int
    frames: int
    fps: int

    def __str__(self):
        return f"{self.width}x{self.height}x{self.frames}@{self.fps}"


@dataclass(frozen=True)
class Profile:
    name: str
    models: str
    channels: int
    temporal: int
    spatial: int
    any_frames: bool  # frame_rule "floor"
    multiple: int  # W and H must be multiples of this
    audio: Optional[Audio] = None
    frame_offset: int = 1
    temporal_steps: int = 1
    latent_offset: int = 1
    fps: int = 0  # the only frame rate the model makes; 0: any

    def latent_frames(self, f):
        return (f - self.frame_offset) // self.temporal * self.temporal_steps + self.latent_offset

    def frames_ok(self, f):
        return f >= self.frame_offset and (
            self.any_frames or (f - self.frame_offset) % self.temporal == 0)

    def next_valid_frames(self, f):
        if f <= self.frame_offset:
            return self.frame_offset
        if self.any_frames:
            return f
        return -(-(f - self.frame_offset) // self.temporal) * self.temporal + self.frame_offset

    def frame_rule(self):
        if self.any_frames:
            return f"any F >= {self.frame_offset}"
        return f"{self.temporal}k+{self.frame_offset}"

    def video_shape(self, g):
        return (1, self.channels, self.latent_frames(g.frames), g.height // self.spatial,
                g.width // self.spatial)

    def audio_lengths(self, g):
        """The audio lengths the profile accepts for geometry g (empty without an audio rule)."""
        if self.audio is None:
            return []
        n = self.audio.length(g.frames, g.fps)
        t = self.audio.tolerance
        return list(range(max(n - t, 0), n + t + 1))

    def audio_shape(self, length):
        return None if self.audio is None else self.audio.with_length(length)

    def audio_rule(self):
        return "none" if self.audio is None else self.audio.describe()

    def audio_length_of(self, shape):
        return None if self.audio is None else self.audio.length_of(shape)


def _from_json(entry):
    a = entry.get("audio")
    audio = None
    if a is not None:
        audio = Audio(tuple(a["shape"]), int(a["rate"][0]), int(a["rate"][1]),
                      a.get("rounding", "ceil"), int(a.get("tolerance", 0)))
    return Profile(entry["name"], entry.get("models", ""), entry["channels"],
                   entry["temporal_factor"], entry["spatial_factor"],
                   entry.get("frame_rule", "strict") == "floor",
                   entry.get("size_multiple", entry["spatial_factor"]), audio,
                   entry.get("frame_offset", 1), entry.get("temporal_steps", 1),
                   entry.get("latent_offset", 1), entry.get("fps", 0))


def load_table(path=TABLE_FILE):
    with open(path, encoding="utf-8") as f:
        return [_from_json(e) for e in json.load(f)["profiles"]]


BUILTIN = load_table()
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


def check_geometry(p, g):
    """The job geometry against the profile's rules (h3pipe's submission rules)."""
    for axis, v in (("width", g.width), ("height", g.height)):
        if v <= 0 or v % p.multiple:
            raise ShapeError(f"{axis} {v} is not a positive multiple of {p.multiple} "
                             f"(profile {p.name})")
    if not p.frames_ok(g.frames):
        raise ShapeError(f"frames {g.frames} does not fit profile {p.name}'s frame rule "
                         f"{p.frame_rule()} (the next valid count is "
                         f"{p.next_valid_frames(g.frames)})")
    if g.fps <= 0:
        raise ShapeError(f"fps {g.fps} must be positive")
    if p.fps and g.fps != p.fps:
        raise ShapeError(f"fps {g.fps}: profile {p.name} makes {p.fps} fps only")


def _frame_candidates(p, t):
    """The frame counts whose latent has T' = t."""
    k, rest = divmod(t - p.latent_offset, p.temporal_steps)
    if k < 0 or rest:
        return []
    first = k * p.temporal + p.frame_offset
    return list(range(first, first + p.temporal)) if p.any_frames else [first]


def fit(profile, video_shape, audio_shape, geometry=None, fps=24):
    """Checks the shapes against `profile`; returns the job geometry (derived when not given).

    With `geometry` the shapes must be exactly what the profile makes for it. Without, W, H and F
    are derived from the latent (F from T' and, with an audio rule, from L)."""
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
        check_geometry(p, g)
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
    fps = p.fps or fps
    if fps <= 0:
        raise ShapeError(f"fps {fps} must be positive")
    candidates = _frame_candidates(p, t)
    if not candidates:
        raise ShapeError(f"video has T' {t} in {_fmt(video_shape)}: profile {p.name} makes no "
                         f"such latent length (frame rule {p.frame_rule()})")
    if p.audio is None:
        return Geometry(width, height, candidates[0], fps)
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
