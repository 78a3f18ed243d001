"""One profile table for the node pack and h3pipe: the pack's profiles (latent_profiles.json, read
by profiles.py) against the table the C++ side compiled in (`h3pipe latent profiles --json`),
whole; and the pack's minimax-h3 shapes against ComfyUI's own rules (comfy_extras/
nodes_minimax_h3.py, written again here in ComfyUI's arithmetic).

$H3PIPE_BIN (default build/bin/h3pipe) for the C++ side; without it that case is skipped."""
import json
import os
import subprocess
import unittest

import support  # noqa: F401  (the pack on sys.path)
from h3pipe_nodes import profiles

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
H3PIPE = os.environ.get("H3PIPE_BIN", os.path.join(REPO, "build", "bin", "h3pipe"))


def as_table_entry(p):
    """A profiles.Profile in the form `h3pipe latent profiles --json` prints."""
    j = {"name": p.name, "models": p.models, "channels": p.channels,
         "temporal_factor": p.temporal, "spatial_factor": p.spatial,
         "frame_rule": "floor" if p.any_frames else "strict", "size_multiple": p.multiple,
         "frame_offset": p.frame_offset, "temporal_steps": p.temporal_steps,
         "latent_offset": p.latent_offset, "fps": p.fps}
    if p.audio is not None:
        j["audio"] = {"shape": list(p.audio.shape), "rate": [p.audio.rate_num, p.audio.rate_den],
                      "rounding": p.audio.rounding, "tolerance": p.audio.tolerance}
    return j


class OneTable(unittest.TestCase):
    def test_the_cpp_table_equals_the_packs(self):
        if not os.access(H3PIPE, os.X_OK):
            self.skipTest(f"h3pipe not built at {H3PIPE}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("H3PIPE_STATE")}
        r = subprocess.run([H3PIPE, "latent", "profiles", "--json"], capture_output=True,
                           text=True, timeout=60, env=env, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        cpp = [p for p in json.loads(r.stdout)["profiles"] if p.pop("source") == "built-in"]
        self.assertEqual(cpp, [as_table_entry(p) for p in profiles.BUILTIN])


# ComfyUI's rules (comfy_extras/nodes_minimax_h3.py), as ComfyUI computes them.
def align_frame_count(n):
    while n % 17 != 5:
        n += 1
    return n


def temporal_shape(length):
    frame_count = align_frame_count(max(5, length))
    latent_t = 2 if frame_count <= 5 else ((frame_count - 5) // 17) * 5 + 2
    return frame_count, latent_t, round(frame_count / 24 * 40)


class MiniMaxH3(unittest.TestCase):
    def test_shapes_equal_comfyuis_for_every_length(self):
        p = profiles.BY_NAME["minimax-h3"]
        for length in range(1, 1200):
            frames, t, a = temporal_shape(length)
            g = profiles.Geometry(736, 416, frames, 24)
            self.assertEqual(p.next_valid_frames(length), frames, length)
            self.assertEqual(p.video_shape(g), (1, 24, t, 26, 46), length)
            self.assertEqual(p.audio_lengths(g), [a], length)
            self.assertEqual(profiles.fit(p, (1, 24, t, 26, 46), (1, 32, 2, a), g), g)
            # and derived back from the shapes alone
            self.assertEqual(profiles.fit(p, (1, 24, t, 26, 46), (1, 32, 2, a)), g)
            if length != frames:
                with self.assertRaises(profiles.ShapeError) as e:
                    profiles.check_geometry(p, profiles.Geometry(736, 416, length, 24))
                self.assertIn(f"the next valid count is {frames}", str(e.exception))

    def test_auto_finds_minimax_h3(self):
        p, g = profiles.auto((1, 24, 37, 26, 46), (1, 32, 2, 207))
        self.assertEqual((p.name, g), ("minimax-h3", profiles.Geometry(736, 416, 124, 24)))

    def test_what_comfyui_cannot_make_is_refused(self):
        p = profiles.BY_NAME["minimax-h3"]
        g = profiles.Geometry(736, 416, 124, 24)
        for video, audio, geometry in [
                ((1, 24, 37, 26, 46), (1, 32, 2, 208), g),  # audio one step long
                ((1, 24, 37, 26, 46), (1, 32, 2, 207), profiles.Geometry(720, 416, 124, 24)),
                ((1, 24, 37, 26, 46), (1, 32, 2, 207), profiles.Geometry(736, 416, 124, 25)),
                ((1, 24, 36, 26, 46), (1, 32, 2, 207), g)]:
            with self.assertRaises(profiles.ShapeError):
                profiles.fit(p, video, audio, geometry)


if __name__ == "__main__":
    unittest.main()
