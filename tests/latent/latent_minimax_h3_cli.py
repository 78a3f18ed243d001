#!/usr/bin/python3
"""MiniMax H3 latents built with ComfyUI's own rules, checked by `h3pipe latent inspect
--profile minimax-h3 --geometry ...` with no config anywhere (the built-in table alone).

The shape rules below are written from ComfyUI's published comfy_extras/nodes_minimax_h3.py
(align_frame_count, video_latent_t, temporal_shape, _empty_av_latent), in ComfyUI's own
arithmetic (Python's round of a float), independently of h3pipe's table: if h3pipe's profile
drifts from ComfyUI's, a valid latent here is refused, or an invalid one accepted.

Usage: latent_minimax_h3_cli.py H3PIPE_BINARY   (exit 0: every case as expected)
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py as st  # noqa: E402

FPS = 24
AUDIO_LATENT_FPS = 40


def align_frame_count(n):  # ComfyUI: snap a length up to the 17k+5 grid
    while n % 17 != 5:
        n += 1
    return n


def video_latent_t(frame_count):
    return 2 if frame_count <= 5 else ((frame_count - 5) // 17) * 5 + 2


def temporal_shape(length):
    frame_count = align_frame_count(max(5, length))
    duration = frame_count / FPS
    return frame_count, video_latent_t(frame_count), round(duration * AUDIO_LATENT_FPS)


def comfy_shapes(width, height, length):
    frame_count, t, a = temporal_shape(length)
    return frame_count, (1, 24, t, height // 16, width // 16), (1, 32, 2, a)


def write(path, video, audio, width, height, frames, fps=FPS):
    meta = {"h3pipe.format": "h3latent", "h3pipe.format_version": "2",
            "h3pipe.profile": "minimax-h3", "h3pipe.width": str(width),
            "h3pipe.height": str(height), "h3pipe.frames": str(frames), "h3pipe.fps": str(fps),
            "h3pipe.layout": "av_nested"}
    rng = np.random.default_rng(frames)
    st.write(path, {"video": rng.standard_normal(video).astype(np.float32),
                    "audio": rng.standard_normal(audio).astype(np.float32)}, meta)


def inspect(binary, path, geometry, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("H3PIPE")}
    r = subprocess.run([binary, "latent", "inspect", path, "--profile", "minimax-h3",
                        "--geometry", geometry], capture_output=True, text=True, cwd=cwd, env=env,
                       timeout=60)
    return r.returncode, (r.stdout + r.stderr).strip()


def main():
    binary = os.path.abspath(sys.argv[1])
    failures, checked = [], 0
    with tempfile.TemporaryDirectory() as d:
        # The seeds' 736x416 (and portrait), ComfyUI's default 1344x768 and a small square.
        sizes = [(736, 416), (416, 736), (1344, 768), (512, 512)]
        lengths = [5, 22, 107, 124, 192, 362, 515]
        for width, height in sizes:
            for length in lengths:
                frames, video, audio = comfy_shapes(width, height, length)
                assert frames == length, "every length here is on the grid already"
                path = os.path.join(d, f"h3_{width}x{height}x{frames}.h3latent")
                write(path, video, audio, width, height, frames)
                rc, out = inspect(binary, path, f"{width}x{height}x{frames}@24", d)
                checked += 1
                if rc != 0:
                    failures.append(f"valid {width}x{height}x{frames} {video} {audio}: rc {rc}: {out}")

        # What ComfyUI cannot make is refused: off-grid frames (the shapes ComfyUI would make for
        # the snapped length, but the job says the raw length), a wrong audio length, a width
        # that is not a multiple of 32, another frame rate.
        bad = []
        frames, video, audio = comfy_shapes(736, 416, 124)
        for off_grid in (120, 123, 125, 121):
            bad.append((f"frames {off_grid}", video, audio, 736, 416, off_grid, 24))
        for wrong in (audio[3] - 1, audio[3] + 1):
            bad.append((f"audio L {wrong}", video, (1, 32, 2, wrong), 736, 416, 124, 24))
        _, v720, a720 = comfy_shapes(720, 416, 124)  # 720 / 16 = 45: a grid ComfyUI never makes
        bad.append(("width 720", v720, a720, 720, 416, 124, 24))
        bad.append(("fps 25", video, audio, 736, 416, 124, 25))
        for what, v, a, w, h, f, fps in bad:
            path = os.path.join(d, "bad.h3latent")
            write(path, v, a, w, h, f, fps)
            rc, out = inspect(binary, path, f"{w}x{h}x{f}@{fps}", d)
            checked += 1
            if rc == 0:
                failures.append(f"invalid ({what}) accepted: {out}")
            elif "minimax-h3" not in out:
                failures.append(f"invalid ({what}) refused without naming the profile: {out}")

    for f in failures:
        print("FAIL", f)
    print(f"{checked - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
