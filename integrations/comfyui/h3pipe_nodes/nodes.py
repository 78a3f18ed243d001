"""The ComfyUI nodes: save/load an h3pipe latent and save/load a CONDITIONING.

A workflow split at the latent ends its sampling half in H3SaveLatent and starts its decode half
with H3LoadLatent; h3pipe moves the file between the two servers. Errors name the node, the
error code and what was expected; a failed save leaves nothing on disk.
"""
import os

from . import conditioning_file, files, latent_file, nested, paths, profiles
from .latent_file import LatentError, LatentFile
from .profiles import Geometry

CATEGORY = "h3pipe"
LATENT_EXT = ".h3latent"
COND_EXT = ".safetensors"


class NodeError(ValueError):
    """What ComfyUI shows as the node's exception message (and h3pipe as the failure reason)."""

    def __init__(self, node, err):
        code = getattr(err, "code", None)
        if not isinstance(code, str):  # OSError.code does not exist; errno is not ours
            code = "io.error" if isinstance(err, OSError) else type(err).__name__
        reason = getattr(err, "reason", None) or str(err)
        if reason.startswith(code + ": "):
            reason = reason[len(code) + 2:]
        super().__init__(f"{node}: {code}: {reason}")
        self.code = code


def _geometry(node, width, height, frames, fps):
    given = [v for v in (width, height, frames) if v]
    if not given:
        return None
    if len(given) != 3:
        raise NodeError(node, LatentError("latent.geometry", f"width {width}, height {height}, "
                                          f"frames {frames}: give all three (or none, 0)"))
    return Geometry(int(width), int(height), int(frames), int(fps))


def _geometry_inputs():
    return {
        "width": ("INT", {"default": 0, "min": 0, "max": 16384,
                          "tooltip": "Job width in pixels; 0: derive it from the latent."}),
        "height": ("INT", {"default": 0, "min": 0, "max": 16384,
                           "tooltip": "Job height in pixels; 0: derive it from the latent."}),
        "frames": ("INT", {"default": 0, "min": 0, "max": 100000,
                           "tooltip": "Job frame count; 0: derive it from the latent."}),
        "fps": ("INT", {"default": 24, "min": 1, "max": 1000,
                        "tooltip": "Job frame rate (h3pipe jobs have whole fps)."}),
    }


def _file_ref(kind, subfolder, name):
    return {"filename": name, "subfolder": subfolder, "type": kind}


def _read_checked(node, path, sha256):
    """(bytes, checked) of the file at `path` (files.read_checked), errors as NodeError."""
    try:
        _, _, full = paths.locate(path, "input")
        if not os.path.isfile(full):
            raise LatentError("path.missing", f"{path}: no such file ({full})")
        return files.read_checked(full, sha256)
    except (paths.PathError, files.SidecarError, LatentError, OSError) as e:
        raise NodeError(node, e)


def _unsigned(node, path):
    return NodeError(node, files.SidecarError(
        "artifact.no_sidecar", f"{path}: no .sha256 sidecar beside it and no sha256 input; h3pipe "
        "files travel with their checksum"))


def _file_hash(path):
    try:
        _, _, full = paths.locate(path, "input")
        return files.sha256_file(full)
    except (paths.PathError, OSError) as e:
        return f"unreadable: {e}"  # changes when the file appears; the load then reports it


def _validate_path(path):
    try:
        _, _, full = paths.locate(path, "input")
    except paths.PathError as e:
        return str(e)
    if not os.path.isfile(full):
        return f"path.missing: {path}: no such file in ComfyUI's input/output folders"
    return True


class _SaveNode:
    """What both save nodes share: an output node whose `save` runs on every prompt."""

    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    @classmethod
    def IS_CHANGED(cls, *_, **__):
        # NaN never equals itself: the save runs on every prompt, even when everything upstream
        # comes from ComfyUI's cache, so the file a finished prompt lists exists then.
        return float("nan")


class H3SaveLatent(_SaveNode):
    DESCRIPTION = ("Saves the sampled latent as an h3pipe .h3latent file (format v2) in the output "
                   "folder, with its .sha256: a video LATENT, a video LATENT plus an audio LATENT, "
                   "or one AV LATENT whose samples is a NestedTensor [video, audio] (LTX-2).")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "samples": ("LATENT", {"tooltip": "The video LATENT, or an AV NestedTensor LATENT."}),
                "filename_prefix": ("STRING", {"default": "h3pipe/latent", "tooltip":
                                               "Folder/name under ComfyUI's output folder."}),
            },
            "optional": {
                "audio": ("LATENT", {"tooltip": "A separate audio LATENT, if the model has one."}),
                "profile": (["auto", "none"] + profiles.NAMES, {"default": "auto", "tooltip":
                            "Latent profile to check against; auto: the first that fits; none: "
                            "structure only (h3pipe checks the job's profile when it reads it)."}),
                **_geometry_inputs(),
            },
        }

    def save(self, samples, filename_prefix="h3pipe/latent", audio=None, profile="auto", width=0,
             height=0, frames=0, fps=24):
        node = type(self).__name__
        try:
            lf = build_latent_file(samples, audio, profile, _geometry(node, width, height, frames,
                                                                      fps), fps)
            data = latent_file.encode(lf)
            kind, sub, name, path = paths.save_target(filename_prefix, LATENT_EXT)
            files.publish_with_sidecar(path, data)
        except NodeError:
            raise
        except (LatentError, paths.PathError, OSError) as e:
            raise NodeError(node, e)
        return {"ui": {"latents": [_file_ref(kind, sub, name)]}}


def build_latent_file(samples, audio, profile, geometry, fps=24):
    """The LatentFile for the save node's inputs (layout detected, profile resolved)."""
    if not isinstance(samples, dict) or "samples" not in samples:
        raise LatentError("latent.type", "samples must be a LATENT (a dict with \"samples\")")
    s = samples["samples"]
    if nested.is_nested(s):
        if audio is not None:
            raise LatentError("latent.layout", "samples is an AV NestedTensor LATENT, which "
                              "already carries the audio: leave the audio input unconnected")
        ts = nested.streams(s)
        if len(ts) != 2:
            raise LatentError("latent.layout", f"the NestedTensor LATENT has {len(ts)} streams: "
                              "expected 2, [video, audio]")
        video, audio_t, layout = ts[0], ts[1], "av_nested"
        video_extra, audio_extra = latent_file.extra_of(samples), {}
    else:
        video, audio_t, layout = s, None, "video"
        video_extra, audio_extra = latent_file.extra_of(samples), {}
        if audio is not None:
            if not isinstance(audio, dict) or "samples" not in audio:
                raise LatentError("latent.type", "audio must be a LATENT (a dict with \"samples\")")
            if nested.is_nested(audio["samples"]):
                raise LatentError("latent.layout", "audio is a NestedTensor LATENT: connect it "
                                  "to samples instead")
            audio_t, layout = audio["samples"], "video+audio"
            audio_extra = latent_file.extra_of(audio)
    for name, t in (("video", video), ("audio", audio_t)):
        if t is not None:
            latent_file.check_values(name, t)
    name, g = latent_file.resolve_profile(profile, video, audio_t, geometry, fps)
    return LatentFile(video, audio_t, layout, name, g, video_extra, audio_extra)


def latent_outputs(lf):
    """(LATENT, audio LATENT or None) as ComfyUI nodes expect them for the file's layout."""
    video = {**lf.video_extra, "samples": lf.video}
    if lf.layout == "video":
        return video, None
    audio = {**lf.audio_extra, "samples": lf.audio}
    if lf.layout == "av_nested":
        return {**lf.video_extra, "samples": nested.make_nested([lf.video, lf.audio])}, audio
    return video, audio


class _LoadNode:
    """What both load nodes share: a changed file re-runs them, a bad path fails at POST /prompt."""

    @classmethod
    def IS_CHANGED(cls, path, **_):
        return _file_hash(path)

    @classmethod
    def VALIDATE_INPUTS(cls, path):
        return _validate_path(path)


class H3LoadLatent(_LoadNode):
    DESCRIPTION = ("Loads an h3pipe latent (.h3latent v2 or v1, checked against its .sha256) or a "
                   "core SaveLatent .latent, and gives back what was saved: the LATENT (video, or "
                   "the whole AV NestedTensor LATENT) and the audio LATENT when there is one.")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "path": ("STRING", {"default": "latent.h3latent", "tooltip":
                                    "File in ComfyUI's input folder (\"NAME [output]\" for the "
                                    "output folder), or an absolute path inside either."}),
            },
            "optional": {
                "sha256": ("STRING", {"default": "", "tooltip": "Expected SHA-256 of the file; "
                                      "empty: the .sha256 sidecar beside it."}),
                "profile": (["file"] + profiles.NAMES, {"default": "file", "tooltip":
                            "Check against this profile; file: the profile the file names."}),
                **_geometry_inputs(),
            },
        }

    RETURN_TYPES = ("LATENT", "LATENT")
    RETURN_NAMES = ("latent", "audio")
    FUNCTION = "load"
    CATEGORY = CATEGORY

    def load(self, path, sha256="", profile="file", width=0, height=0, frames=0, fps=24):
        node = type(self).__name__
        geometry = _geometry(node, width, height, frames, fps)
        data, checked = _read_checked(node, path, sha256)
        try:
            lf = latent_file.decode(data)
            if not checked and lf.source != "comfyui .latent":  # core SaveLatent writes no sidecar
                raise _unsigned(node, path)
            want = lf.profile if profile == "file" else profile
            if want in profiles.BY_NAME and (profile != "file" or geometry is not None):
                profiles.fit(profiles.BY_NAME[want], tuple(lf.video.shape),
                             None if lf.audio is None else tuple(lf.audio.shape), geometry, fps)
            elif geometry is not None:
                raise LatentError("latent.profile", f"the file's profile is \"{lf.profile}\": "
                                  "choose a profile to check the geometry against")
        except (LatentError, profiles.ShapeError) as e:
            raise NodeError(node, e)
        return latent_outputs(lf)


class H3SaveConditioning(_SaveNode):
    DESCRIPTION = ("Saves a CONDITIONING (tensors and their options) as a safetensors file with its "
                   ".sha256, so text encoding can run as its own h3pipe stage.")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "conditioning": ("CONDITIONING",),
            "filename_prefix": ("STRING", {"default": "h3pipe/conditioning"}),
        }}


    def save(self, conditioning, filename_prefix="h3pipe/conditioning"):
        node = type(self).__name__
        try:
            data = conditioning_file.encode(conditioning)
            kind, sub, name, path = paths.save_target(filename_prefix, COND_EXT)
            files.publish_with_sidecar(path, data)
        except (LatentError, paths.PathError, OSError) as e:
            raise NodeError(node, e)
        return {"ui": {"conditioning": [_file_ref(kind, sub, name)]}}


class H3LoadConditioning(_LoadNode):
    DESCRIPTION = "Loads a CONDITIONING saved by H3SaveConditioning (checked against its .sha256)."

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"path": ("STRING", {"default": "conditioning.safetensors"})},
                "optional": {"sha256": ("STRING", {"default": ""})}}

    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "load"
    CATEGORY = CATEGORY

    def load(self, path, sha256=""):
        node = type(self).__name__
        data, checked = _read_checked(node, path, sha256)
        if not checked:
            raise _unsigned(node, path)
        try:
            return (conditioning_file.decode(data),)
        except LatentError as e:
            raise NodeError(node, e)


class H3SaveAVLatent(H3SaveLatent):
    """The name configs/comfyui templates used before the pack existed; same node."""


class H3LoadAVLatent(H3LoadLatent):
    """The name configs/comfyui templates used before the pack existed; same node."""
