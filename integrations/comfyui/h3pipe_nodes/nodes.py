"""The ComfyUI nodes: save/load an h3pipe latent and save/load a CONDITIONING.

A workflow split at the latent ends its sampling half in H3SaveLatent and starts its decode half
with H3LoadLatent; h3pipe moves the file between the two servers. Errors name the node, the
error code and what was expected; a failed save leaves nothing on disk. Only NodeError leaves a
node's function: its message is exactly `NODE: CODE: reason`.
"""
import functools
import os

from . import conditioning_file, files, latent_file, nested, paths, profiles
from . import safetensors_io as st
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


class _Unexpected(Exception):
    """An exception a node did not expect (a bug, or its environment): code node.internal, the
    exception's type and first line as the reason."""

    code = "node.internal"

    def __init__(self, err):
        first = (str(err).strip().splitlines() or [""])[0].strip()[:300]
        self.reason = f"{type(err).__name__}{': ' + first if first else ''} (unexpected inside " \
                      "the node)"
        super().__init__(self.reason)


# h3pipe's own errors: each carries its code (OSError: io.error)
_EXPECTED = (LatentError, paths.PathError, files.SidecarError, profiles.ShapeError, st.FormatError,
             OSError)


def _reported(fn):
    """Wraps a node's FUNCTION so that only NodeError leaves it (h3pipe reads the code from the
    message ComfyUI reports); ComfyUI's own interrupt passes through."""

    @functools.wraps(fn)
    def run(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except NodeError:
            raise
        except _EXPECTED as e:
            raise NodeError(type(self).__name__, e) from e
        except Exception as e:  # noqa: BLE001 - reported with a code, never as a bare type name
            if type(e).__name__ == "InterruptProcessingException":
                raise
            raise NodeError(type(self).__name__, _Unexpected(e)) from e
    return run


def _geometry(node, width, height, frames, fps):
    given = [v for v in (width, height, frames) if v]
    if not given:
        return None
    if len(given) != 3:
        raise NodeError(node, LatentError("latent.geometry", f"width {width}, height {height}, "
                                          f"frames {frames}: give all three (or none, 0)"))
    try:
        return Geometry(int(width), int(height), int(frames), int(fps))
    except (TypeError, ValueError):
        raise NodeError(node, LatentError("latent.geometry", f"width {width!r}, height "
                                          f"{height!r}, frames {frames!r}, fps {fps!r}: whole "
                                          "numbers expected")) from None


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
                   "or one AV LATENT whose samples is a NestedTensor [video, audio] (MiniMax H3, "
                   "LTX-2), kept whole. A NaN/Inf value fails with latent.nonfinite and writes "
                   "nothing.")

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

    @_reported
    def save(self, samples, filename_prefix="h3pipe/latent", audio=None, profile="auto", width=0,
             height=0, frames=0, fps=24):
        node = type(self).__name__
        for given in (samples, audio):
            if isinstance(given, NoAudio):  # H3LoadLatent's audio of a file without audio
                raise given.error()
        lf = build_latent_file(samples, audio, profile, _geometry(node, width, height, frames, fps),
                               fps)
        data = latent_file.encode(lf)
        kind, sub, name, path = paths.save_target(filename_prefix, LATENT_EXT)
        files.publish_with_sidecar(path, data)
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
    latent_file.check_values("video", video)
    if audio_t is not None:
        latent_file.check_values("audio", audio_t)
    name, g = latent_file.resolve_profile(profile, video, audio_t, geometry, fps)
    return LatentFile(video, audio_t, layout, name, g, video_extra, audio_extra)


AUDIO_OUTPUT = 1  # H3LoadLatent's output slot "audio"


class NoAudio(dict):
    """H3LoadLatent's audio output for a file without audio: an empty LATENT that raises the
    loader's reason (latent.missing_tensor) when a node reads its samples, where None would fail
    in that node as "'NoneType' object is not subscriptable". Empty, so `if audio:` is false."""

    def __init__(self, node, reason):
        super().__init__()
        self.node, self.reason = node, reason

    def error(self):
        return NodeError(self.node, LatentError("latent.missing_tensor", self.reason))

    def __missing__(self, key):
        raise self.error()

    def get(self, key, default=None):
        if key == "samples" and key not in self:
            raise self.error()
        return super().get(key, default)

    def copy(self):
        c = NoAudio(self.node, self.reason)
        c.update(self)
        return c


def readers(prompt, unique_id, output):
    """'node ID (CLASS) input NAME' for each input of the API-format prompt that is linked to
    output slot `output` of node `unique_id` (a link is [node id, slot])."""
    if not isinstance(prompt, dict) or unique_id is None:
        return []
    found = []
    for nid, n in prompt.items():
        inputs = n.get("inputs") if isinstance(n, dict) else None
        for name, v in (inputs if isinstance(inputs, dict) else {}).items():
            if (isinstance(v, list) and len(v) == 2 and str(v[0]) == str(unique_id)
                    and v[1] == output):
                found.append(f"node {nid} ({n.get('class_type', '?')}) input {name}")
    return sorted(found)


def latent_outputs(lf, no_audio=None):
    """(LATENT, audio LATENT) as ComfyUI nodes expect them for the file's layout; for a file
    without audio the audio LATENT is `no_audio` (a NoAudio)."""
    video = {**lf.video_extra, "samples": lf.video}
    if lf.layout == "video":
        return video, no_audio
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
    DESCRIPTION = (
        "Loads an h3pipe latent (.h3latent v2 or v1, checked against its .sha256) or a core "
        "SaveLatent .latent and gives back what was saved. Output latent: the video LATENT, or for "
        "an AV file saved from one NestedTensor LATENT (MiniMax H3, LTX-2) that whole LATENT, as "
        "ComfyUI's comfy.nested_tensor.NestedTensor (a stand-in with its API where ComfyUI has "
        "none): core VAEDecode decodes its video (unbind()[0]), VAEDecodeAudio its audio "
        "(unbind()[-1]). Output audio: the audio LATENT alone (plain tensor) of a file with audio. "
        "A file without audio has none to give: with the audio output connected the load fails "
        "(latent.missing_tensor, naming the node it feeds); unconnected it is an empty LATENT that "
        "raises the same reason if read. A profile other than file applies h3pipe's reader rule: "
        "the file must name that profile (latent.profile) and, given width/height/frames/fps, that "
        "job (latent.geometry).")

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
                            "Check as h3pipe checks a job's latent: the file must name this "
                            "profile, its shapes fit it (and the job, given width/height/frames/"
                            "fps); file: check against the profile the file names."}),
                **_geometry_inputs(),
            },
            # ComfyUI does not tell a node which outputs are linked; the prompt does
            "hidden": {"prompt": "PROMPT", "unique_id": "UNIQUE_ID"},
        }

    RETURN_TYPES = ("LATENT", "LATENT")
    RETURN_NAMES = ("latent", "audio")
    FUNCTION = "load"
    CATEGORY = CATEGORY

    @_reported
    def load(self, path, sha256="", profile="file", width=0, height=0, frames=0, fps=24,
             prompt=None, unique_id=None):
        node = type(self).__name__
        geometry = _geometry(node, width, height, frames, fps)
        data, checked = _read_checked(node, path, sha256)
        lf = latent_file.decode(data)
        if not checked and lf.source != "comfyui .latent":  # core SaveLatent writes no sidecar
            raise _unsigned(node, path)
        if profile != "file":
            if profile not in profiles.BY_NAME:
                raise LatentError("latent.profile", f"unknown latent profile \"{profile}\" (built "
                                  f"in: {', '.join(profiles.NAMES)}; or \"file\")")
            latent_file.check_expected(lf, profile, geometry, fps)
        elif geometry is not None:
            if lf.profile not in profiles.BY_NAME:
                raise LatentError("latent.profile", f"the file's profile is \"{lf.profile}\": "
                                  "choose a profile to check the geometry against")
            latent_file.check_expected(lf, lf.profile, geometry, fps)
        if lf.audio is not None:
            return latent_outputs(lf)
        why = f"{path} holds no audio (layout {lf.layout}, profile {lf.profile})"
        linked = readers(prompt, unique_id, AUDIO_OUTPUT)
        if linked:
            raise LatentError("latent.missing_tensor", f"{why}, but the audio output is connected "
                              f"to {', '.join(linked)}: disconnect it, or load a latent saved with "
                              "audio")
        return latent_outputs(lf, NoAudio(node, f"{why}: a node read the loader's empty audio "
                                          "output; disconnect it, or load a latent saved with "
                                          "audio"))


class H3SaveConditioning(_SaveNode):
    DESCRIPTION = ("Saves a CONDITIONING (tensors and their options) as a safetensors file with its "
                   ".sha256, so text encoding can run as its own h3pipe stage.")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "conditioning": ("CONDITIONING",),
            "filename_prefix": ("STRING", {"default": "h3pipe/conditioning"}),
        }}


    @_reported
    def save(self, conditioning, filename_prefix="h3pipe/conditioning"):
        data = conditioning_file.encode(conditioning)
        kind, sub, name, path = paths.save_target(filename_prefix, COND_EXT)
        files.publish_with_sidecar(path, data)
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

    @_reported
    def load(self, path, sha256=""):
        node = type(self).__name__
        data, checked = _read_checked(node, path, sha256)
        if not checked:
            raise _unsigned(node, path)
        return (conditioning_file.decode(data),)


class H3SaveAVLatent(H3SaveLatent):
    """The name configs/comfyui templates used before the pack existed; same node."""


class H3LoadAVLatent(H3LoadLatent):
    """The name configs/comfyui templates used before the pack existed; same node."""
