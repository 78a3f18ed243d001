"""Stand-ins for ComfyUI's media nodes a core H3 workflow ends or starts with, executed for real by
FakeComfyUiServer --exec-python-nodes h3_standins: they read and write real files with the ffmpeg
CLI (Debian's python3 has no PyAV here).

- CreateVideo(images, fps, audio=None) -> VIDEO, as comfy_extras/nodes_video.py CreateVideo: the
  frames [F, H, W, 3] in [0, 1], the AUDIO {"waveform": [1, C, L], "sample_rate"} and the rate;
- SaveVideo(video, filename_prefix, format, codec) as nodes_video.py SaveVideo: an MP4 (H.264
  yuv420p, and AAC when the video has audio) named like folder_paths.get_save_image_path,
  PREFIX_00001_.mp4 under output/, ui {"images": [ref], "animated": [True]};
- LoadImage(image) as nodes.py LoadImage: IMAGE [1, H, W, 3] in [0, 1] and MASK [1, H, W];
- LoadAudio(audio) as comfy_extras/nodes_audio.py LoadAudio: the file under input/ decoded to
  AUDIO {"waveform": float32 [1, C, L] in [-1, 1], "sample_rate": the file's rate};
  VALIDATE_INPUTS "Invalid audio file: NAME" for a name input/ lacks, IS_CHANGED the file's
  SHA-256 (as ComfyUI's).  The /object_info list (files of audio/video content type) is filled by
  the fake's NodeSet.spec.
The folders: H3PIPE_COMFY_OUTPUT / H3PIPE_COMFY_INPUT (the node pack's variables outside ComfyUI).
"""
import hashlib
import json
import os
import re
import subprocess
import tempfile

import torch


def _dir(kind):
    var = "H3PIPE_COMFY_OUTPUT" if kind == "output" else "H3PIPE_COMFY_INPUT"
    return os.path.abspath(os.environ.get(var, kind))


def save_path(filename_prefix, ext):
    """(subfolder, filename, full path) as folder_paths.get_save_image_path names a new file."""
    subfolder, _, base = str(filename_prefix).rpartition("/")
    root = _dir("output")
    folder = os.path.abspath(os.path.join(root, subfolder))
    if os.path.commonpath((root, folder)) != root:
        raise ValueError(f"Saving image outside the output folder is not allowed.\n full_output_folder: "
                         f"{folder}\n         output_dir: {root}")
    os.makedirs(folder, exist_ok=True)
    pat = re.compile(re.escape(base) + r"_(\d+)_")
    counters = [int(m.group(1)) for n in os.listdir(folder) if (m := pat.match(n))]
    name = f"{base}_{max(counters, default=0) + 1:05}_.{ext}"
    return subfolder, name, os.path.join(folder, name)


class StandInVideo:
    """comfy_api's VideoFromComponents: images, audio, frame rate."""

    def __init__(self, images, audio, frame_rate):
        self.images, self.audio, self.frame_rate = images, audio, frame_rate

    def get_dimensions(self):
        return int(self.images.shape[2]), int(self.images.shape[1])

    def save_to(self, path):
        frames = (self.images[..., :3].clamp(0, 1) * 255).round().to(torch.uint8).contiguous()
        count, height, width = int(frames.shape[0]), int(frames.shape[1]), int(frames.shape[2])
        with tempfile.TemporaryDirectory(prefix="h3standin_") as tmp:
            cmd = ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
                   "-s", f"{width}x{height}", "-r", f"{self.frame_rate}", "-i", "pipe:0"]
            if self.audio is not None:
                wave = self.audio["waveform"][0].float().clamp(-1, 1)  # [C, L]
                raw = os.path.join(tmp, "audio.f32")
                with open(raw, "wb") as f:
                    f.write(wave.t().contiguous().numpy().tobytes())
                cmd += ["-f", "f32le", "-ar", str(int(self.audio["sample_rate"])),
                        "-ac", str(int(wave.shape[0])), "-i", raw]
            cmd += ["-frames:v", str(count), "-c:v", "libx264", "-pix_fmt", "yuv420p"]
            if self.audio is not None:
                cmd += ["-c:a", "aac"]
            part = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".part")
            try:
                subprocess.run(cmd + ["-f", "mp4", part], input=frames.numpy().tobytes(), check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                os.replace(part, path)
            finally:
                if os.path.exists(part):
                    os.unlink(part)


class CreateVideo:
    FUNCTION = "execute"

    def execute(self, images, fps, audio=None):
        return (StandInVideo(images, audio, fps),)


class SaveVideo:
    FUNCTION = "execute"
    OUTPUT_NODE = True

    def execute(self, video, filename_prefix, format="auto", codec="auto", prompt=None,  # noqa: A002
                extra_pnginfo=None):
        subfolder, name, path = save_path(filename_prefix, "mp4")
        video.save_to(path)
        return {"ui": {"images": [{"filename": name, "subfolder": subfolder, "type": "output"}],
                       "animated": [True]}, "result": ()}


class LoadImage:
    FUNCTION = "load_image"

    def load_image(self, image):
        path = image if os.path.isabs(image) else os.path.join(_dir("input"), image)
        probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                                "stream=width,height", "-of", "json", path],
                               check=True, capture_output=True, text=True)
        s = json.loads(probe.stdout)["streams"][0]
        w, h = int(s["width"]), int(s["height"])
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-frames:v", "1", "-f", "rawvideo",
                              "-pix_fmt", "rgb24", "pipe:1"], check=True, capture_output=True).stdout
        pixels = torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(1, h, w, 3)
        return (pixels.float() / 255.0, torch.zeros([1, h, w]))


def _input_path(name):
    return name if os.path.isabs(name) else os.path.join(_dir("input"), name)


class LoadAudio:
    FUNCTION = "load"

    @classmethod
    def VALIDATE_INPUTS(cls, audio):
        if not os.path.isfile(_input_path(audio)):
            return f"Invalid audio file: {audio}"
        return True

    @classmethod
    def IS_CHANGED(cls, audio):
        m = hashlib.sha256()
        with open(_input_path(audio), "rb") as f:
            m.update(f.read())
        return m.digest().hex()

    def load(self, audio):
        path = _input_path(audio)
        probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
                                "stream=sample_rate,channels", "-of", "json", path],
                               check=True, capture_output=True, text=True)
        s = json.loads(probe.stdout)["streams"][0]
        rate, channels = int(s["sample_rate"]), int(s["channels"])
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:a:0", "-f", "f32le",
                              "-ac", str(channels), "-ar", str(rate), "pipe:1"],
                             check=True, capture_output=True).stdout
        wave = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(-1, channels).t()
        return ({"waveform": wave.unsqueeze(0).contiguous(), "sample_rate": rate},)


NODE_CLASS_MAPPINGS = {"CreateVideo": CreateVideo, "SaveVideo": SaveVideo, "LoadImage": LoadImage,
                       "LoadAudio": LoadAudio}
