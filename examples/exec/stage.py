#!/usr/bin/python3
"""An `exec` runtime stage in a few lines: what an operator's own script looks like.

    stage.py encode SPEC_JSON OUTPUT          -> conditioning tensor (safetensors layout)
    stage.py sample SPEC_JSON INPUT OUTPUT    -> dual-stream .h3latent (docs/design.md geometry)
    stage.py decode SPEC_JSON INPUT OUTPUT    -> MP4 (H.264 + AAC) through the ffmpeg CLI

Writes with numpy only (Debian's python3-numpy), from the published safetensors layout:
8-byte little-endian header length, JSON header, raw little-endian data.
"""
import json
import math
import struct
import subprocess
import sys

import numpy as np


def write_safetensors(path, tensors, metadata):
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    stage, spec = sys.argv[1], json.loads(sys.argv[2])
    out = sys.argv[-1]
    w, h = spec.get("width", 256), spec.get("height", 256)
    frames, fps = spec.get("frames", 49), spec.get("fps", 24)
    rng = np.random.default_rng(int(spec.get("seed", 0)))
    if stage == "encode":
        write_safetensors(out, {"cond": rng.standard_normal((1, 77, 256))}, {"runtime": "exec"})
    elif stage == "sample":
        t = (frames - 1) // 4 + 1
        audio_len = math.ceil(frames / fps * 48000 / 86)
        video = rng.standard_normal((1, 24, t, h // 16, w // 16)) * 0.5
        audio = rng.standard_normal((1, 32, 2, audio_len)) * 0.5
        write_safetensors(out, {"video": video, "audio": audio}, {"runtime": "exec"})
    elif stage == "decode":
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={w}x{h}:rate={fps}",
                        "-f", "lavfi", "-i", "sine=frequency=330:sample_rate=48000",
                        "-frames:v", str(frames), "-t", str(frames / fps), "-ac", "2",
                        "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac",
                        "-movflags", "+faststart", "-f", "mp4", out], check=True)
    else:
        sys.exit(f"unknown stage {stage}")


if __name__ == "__main__":
    main()
