"""The /object_info entries of the classes h3_standin_nodes.py and h3_standin_media.py stand in for.

Where they come from, first match wins:
1. tests/comfyui/object_info_minimax_h3_from_source.json when present (the H3 core classes
   written from ComfyUI's source for `comfyui split`'s tests);
2. the classes below, written from ComfyUI's source: comfy_extras/nodes_minimax_h3.py
   (EmptyMiniMaxH3LatentAV, MiniMaxH3ImageToVideo, MiniMaxH3ReferenceToVideo, MiniMaxH3SigmaShift,
   as the V3 schema renders them in /object_info), nodes.py CLIPLoader (its `type` list, which
   gained "minimax" with H3) and comfy_extras/nodes_custom_sampler.py CFGGuider;
3. a real ComfyUI 0.3.64's answers (fake_comfyui_core_nodes.json) for the classes H3 did not change:
   UNETLoader, VAELoader, RandomNoise, KSamplerSelect, BasicScheduler, BasicGuider,
   SamplerCustomAdvanced, VAEDecode, VAEDecodeAudio, CreateVideo, SaveVideo, LoadImage.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
FROM_SOURCE = os.path.join(HERE, "..", "comfyui", "object_info_minimax_h3_from_source.json")
MAX_RESOLUTION = 16384  # nodes.MAX_RESOLUTION
H3 = "comfy_extras.nodes_minimax_h3"

# nodes.py CLIPLoader after H3 (Comfy-Org/ComfyUI, 2026): the 0.3.64 list plus the later types.
CLIP_TYPES = ["stable_diffusion", "stable_cascade", "sd3", "stable_audio", "mochi", "ltxv", "pixart",
              "cosmos", "lumina2", "wan", "hidream", "chroma", "ace", "omnigen2", "qwen_image",
              "hunyuan_image", "flux2", "ovis", "longcat_image", "cogvideox", "lens", "pixeldit",
              "ideogram4", "boogu", "krea2", "joyimage", "mage", "minimax", "yue2"]

_LENGTH_TIP = ("Frame count at 24 fps, snapped up to the model's 17k+5 grid (124 = ~5s; trained "
               "range is ~124-362, longer is untested)")


def _v3(name, display, category, required, optional=None, output=(), output_name=None,
        description="", module=H3, output_node=False):
    """An entry the way ComfyUI's V3 schema (comfy_api io.Schema) answers /object_info."""
    inp = {"required": required}
    order = {"required": list(required)}
    if optional:
        inp["optional"] = optional
        order["optional"] = list(optional)
    return {"input": inp, "input_order": order, "output": list(output),
            "output_is_list": [False] * len(output), "output_name": list(output_name or output),
            "output_tooltips": [None] * len(output), "name": name, "display_name": display,
            "description": description, "python_module": module, "category": category,
            "output_node": output_node, "deprecated": False, "experimental": False,
            "api_node": False}


def _int(default, lo, hi, step=None, tooltip=None):
    o = {"default": default, "min": lo, "max": hi}
    if step:
        o["step"] = step
    if tooltip:
        o["tooltip"] = tooltip
    return ["INT", o]


def _size():
    return {"width": _int(1344, 32, MAX_RESOLUTION, 32), "height": _int(768, 32, MAX_RESOLUTION, 32)}


def _prompt():
    return ["STRING", {"multiline": True, "dynamicPrompts": True}]


def _from_source():
    autogrow = lambda prefix, kind, n: [f"AUTOGROW:{kind}", {"prefix": prefix, "max": n}]  # noqa: E731
    return {
        "EmptyMiniMaxH3LatentAV": _v3(
            "EmptyMiniMaxH3LatentAV", "Empty MiniMax H3 AV Latent", "model/latent/minimax",
            {**_size(), "length": _int(124, 5, 3600, 17, _LENGTH_TIP)}, output=["LATENT"],
            description="Joint video+audio latent for MiniMax H3. Duration snaps to the model's "
                        "17k+5 frame grid at 24 fps."),
        "MiniMaxH3ImageToVideo": _v3(
            "MiniMaxH3ImageToVideo", "MiniMax H3 Image to Video", "model/conditioning/minimax",
            {"clip": ["CLIP", {}], "vae": ["VAE", {}], "prompt": _prompt(), **_size(),
             "length": _int(124, 5, 3600, 17, _LENGTH_TIP)},
            {"first_frame": ["IMAGE", {}], "last_frame": ["IMAGE", {}]},
            output=["CONDITIONING", "LATENT"], output_name=["positive", "LATENT"]),
        "MiniMaxH3ReferenceToVideo": _v3(
            "MiniMaxH3ReferenceToVideo", "MiniMax H3 Reference to Video", "model/conditioning/minimax",
            {"clip": ["CLIP", {}], "prompt": _prompt(), **_size(),
             "length": _int(124, 5, 3600, 17, "Frame count at 24 fps, (124 = ~5s, trained range "
                                               "is ~124-362)"),
             "ref_image_size": ["COMBO", {"default": "match", "multiselect": False,
                                          "options": ["match", "max"]}]},
            {"vae": ["VAE", {}], "audio_vae": ["VAE", {}],
             "ref_images": autogrow("ref_image_", "IMAGE,MINIMAX_H3_REFERENCE_IMAGE", 9),
             "ref_videos": autogrow("ref_video_", "IMAGE", 3),
             "ref_video_audios": autogrow("ref_video_audio_", "AUDIO", 3),
             "ref_audios": autogrow("ref_audio_", "AUDIO", 3)},
            output=["CONDITIONING", "LATENT"], output_name=["positive", "LATENT"],
            description="<Picture i> / <Video k> / <Audio j> reference conditioning for MiniMax H3. "
                        "Use the same tags when prompting."),
        "MiniMaxH3SigmaShift": _v3(
            "MiniMaxH3SigmaShift", "ModelSamplingMiniMaxH3", "model/patch/minimax",
            {"model": ["MODEL", {}],
             "shift_video": ["FLOAT", {"default": 12.0, "min": 0.01, "max": 100.0, "step": 0.01}],
             "shift_audio": ["FLOAT", {"default": 3.0, "min": 0.01, "max": 100.0, "step": 0.01}]},
            output=["MODEL"], description="Set the video/audio flow shifts."),
        "H3TestNestedProbe": _v3(
            "H3TestNestedProbe", "H3TestNestedProbe", "h3pipe/test", {"samples": ["LATENT", {}]},
            module="custom_nodes.h3_test", output_node=True,
            description="A test node: what a LATENT's samples is (class, streams, SHA-256)."),
        "CFGGuider": {
            "input": {"required": {"model": ["MODEL"], "positive": ["CONDITIONING"],
                                   "negative": ["CONDITIONING"],
                                   "cfg": ["FLOAT", {"default": 8.0, "min": 0.0, "max": 100.0,
                                                     "step": 0.1, "round": 0.01}]}},
            "input_order": {"required": ["model", "positive", "negative", "cfg"]},
            "output": ["GUIDER"], "output_is_list": [False], "output_name": ["GUIDER"],
            "name": "CFGGuider", "display_name": "CFGGuider", "description": "",
            "python_module": "comfy_extras.nodes_custom_sampler", "category": "sampling/custom_sampling/guiders",
            "output_node": False},
    }


def _load():
    with open(os.path.join(HERE, "fake_comfyui_core_nodes.json")) as f:
        out = json.load(f)["classes"]
    out = {k: v for k, v in out.items()}
    clip = json.loads(json.dumps(out["CLIPLoader"]))
    clip["input"]["required"]["type"] = [list(CLIP_TYPES)]
    out["CLIPLoader"] = clip
    out.update(_from_source())
    if os.path.isfile(FROM_SOURCE):
        with open(FROM_SOURCE) as f:
            given = json.load(f)
        given = given.get("classes", given)
        out.update({k: v for k, v in given.items() if isinstance(v, dict) and "input" in v})
    return out


SPECS = _load()
