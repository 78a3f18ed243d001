#!/usr/bin/python3
"""Writes object_info_minimax_h3_from_source.json: what GET /object_info answers for the classes
the MiniMax H3 templates and tests use, on a ComfyUI with the H3 core nodes (since Aug 2026).
Usage (from the repository root):
    tests/comfyui/make_object_info_minimax_h3.py > tests/comfyui/object_info_minimax_h3_from_source.json
    tests/comfyui/make_object_info_minimax_h3.py --raylight > tests/comfyui/object_info_raylight_h3_from_source.json
(--raylight: the classes of configs/comfyui/templates/minimax_h3_two_host that are not core.)

Where each entry comes from (README.md in this folder says the same):
- the six H3 classes: transcribed from the public ComfyUI source, comfy_extras/nodes_minimax_h3.py
  (Comfy-Org/ComfyUI commit 13a83ce7), serialised as comfy_api/latest/_io.py does it
  (Schema.get_v1_info, create_input_dict_v1, the Input.as_dict of each type; Autogrow inputs as
  ["COMFY_AUTOGROW_V3", {"template": ...}]); no ComfyUI code is copied, only the schema values;
- CLIPLoader, UNETLoader, VAEDecode, VAEDecodeAudio: from the same source's nodes.py (02217e36)
  and comfy_extras/nodes_audio.py (3fa38fd9): CLIPLoader's type list has "minimax";
- every other class: copied unchanged from recorded_object_info_v0.3.64.json (a real server's
  answer; their inputs were not compared with the newer source).
Model-file lists are empty, as on a server without models."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_RESOLUTION = 16384
LENGTH_TIP = ("Frame count at 24 fps, snapped up to the model's 17k+5 grid (124 = ~5s; trained "
              "range is ~124-362, longer is untested)")


def v3_node(name, display, category, required, optional=None, outputs=(), description="",
            search_aliases=None):
    """One class as Schema.get_v1_info + asdict(NodeInfoV1) serialise a v3 node."""
    inp = {"required": dict(required)}
    if optional:
        inp["optional"] = dict(optional)
    return {
        "input": inp,
        "input_order": {k: list(v.keys()) for k, v in inp.items()},
        "is_input_list": False,
        "output": [t for t, _ in outputs],
        "output_is_list": [False for _ in outputs],
        "output_name": [n if n else t for t, n in outputs],
        "output_tooltips": [None for _ in outputs],
        "output_matchtypes": None,
        "name": name,
        "display_name": display,
        "description": description,
        "python_module": "comfy_extras.nodes_minimax_h3",
        "category": category,
        "output_node": False,
        "has_intermediate_output": False,
        "deprecated": False,
        "experimental": False,
        "dev_only": False,
        "api_node": False,
        "price_badge": None,
        "search_aliases": search_aliases,
        "essentials_category": None,
    }


def int_in(default, lo, hi, step=None, tooltip=None):
    d = {"default": default, "min": lo, "max": hi}
    if tooltip is not None:
        d = {"tooltip": tooltip, **d}
    if step is not None:
        d["step"] = step
    return ["INT", d]


def size_inputs():
    return [
        ("width", int_in(1344, 32, MAX_RESOLUTION, 32)),
        ("height", int_in(768, 32, MAX_RESOLUTION, 32)),
    ]


def autogrow(template_name, io_type, tooltip, prefix, lo, hi):
    return ["COMFY_AUTOGROW_V3", {"template": {
        "input": {"required": {template_name: [io_type, {"tooltip": tooltip}]}},
        "prefix": prefix, "min": lo, "max": hi}}]


def h3_classes():
    prompt = ["STRING", {"multiline": True, "dynamicPrompts": True}]
    out = {}
    out["EmptyMiniMaxH3LatentAV"] = v3_node(
        "EmptyMiniMaxH3LatentAV", "Empty MiniMax H3 AV Latent", "model/latent/minimax",
        size_inputs() + [("length", int_in(124, 5, 3600, 17, LENGTH_TIP))],
        outputs=[("LATENT", None)],
        description="Joint video+audio latent for MiniMax H3. Duration snaps to the model's 17k+5 "
                    "frame grid at 24 fps.")
    out["MiniMaxH3ImageToVideo"] = v3_node(
        "MiniMaxH3ImageToVideo", "MiniMax H3 Image to Video", "model/conditioning/minimax",
        [("clip", ["CLIP", {}]), ("vae", ["VAE", {}]), ("prompt", prompt)] + size_inputs() +
        [("length", int_in(124, 5, 3600, 17, LENGTH_TIP))],
        optional=[("first_frame", ["IMAGE", {}]), ("last_frame", ["IMAGE", {}])],
        outputs=[("CONDITIONING", "positive"), ("LATENT", None)])
    out["MiniMaxH3AddGuide"] = v3_node(
        "MiniMaxH3AddGuide", "Add Guide for MiniMax H3", "model/conditioning/minimax",
        [("positive", ["CONDITIONING", {}]), ("latent", ["LATENT", {}]),
         ("frame_idx", int_in(0, -9999, 9999, None,
                              "Frame index to anchor the image or the clip's first frame at. "
                              "Negative values are counted from the end of the video."))],
        optional=[("vae", ["VAE", {"tooltip": "Video VAE, needed when an image is connected."}]),
                  ("audio_vae", ["VAE", {"tooltip": "Audio VAE, needed when an audio is "
                                                    "connected."}]),
                  ("image", ["IMAGE", {"tooltip": "Image or video frames to anchor. Multi-frame "
                             "batches are anchored as a clip and cropped down to the model's "
                             "valid clip lengths: 5, 22, 39... (17k + 5) frames. Batches shorter "
                             "than 5 frames use only the first image."}]),
                  ("audio", ["AUDIO", {"tooltip": "Soundtrack to anchor starting at the same "
                             "frame index, cropped to the video's remaining duration."}])],
        outputs=[("CONDITIONING", "positive")],
        description="Anchor an image, a short clip, audio, or a clip with its soundtrack at any "
                    "frame of a MiniMax H3 video. Chain several nodes to anchor several frames.")
    out["MiniMaxH3TextEncoderOnlyReference"] = v3_node(
        "MiniMaxH3TextEncoderOnlyReference", "MiniMax H3 Text Encoder Only Reference",
        "model/conditioning/minimax", [("image", ["IMAGE", {}])],
        outputs=[("MINIMAX_H3_REFERENCE_IMAGE", "reference_image")],
        description="Mark a reference image to condition the MiniMax H3 text encoder without VAE "
                    "encoding it for the diffusion model.")
    out["MiniMaxH3ReferenceToVideo"] = v3_node(
        "MiniMaxH3ReferenceToVideo", "MiniMax H3 Reference to Video", "model/conditioning/minimax",
        [("clip", ["CLIP", {}]), ("prompt", prompt)] + size_inputs() +
        [("length", int_in(124, 5, 3600, 17,
                           "Frame count at 24 fps, (124 = ~5s, trained range is ~124-362)")),
         ("ref_image_size", ["COMBO", {
             "tooltip": "Reference image sizing. 'match' scales each ref (down only, keeping "
                        "aspect) to the generation's pixel area; 'max' uses the reference "
                        "pipeline's 2048px short edge for best identity fidelity. Reference tokens "
                        "ride through every sampling step, so 'max' can be several times slower.",
             "default": "match", "multiselect": False, "options": ["match", "max"]}])],
        optional=[
            ("vae", ["VAE", {"tooltip": "Video VAE. Without it reference images/videos only "
                                        "condition the text encoder."}]),
            ("audio_vae", ["VAE", {"tooltip": "Audio VAE. Without it reference audio only "
                                              "conditions the text encoder."}]),
            ("ref_images", autogrow("ref_image", "IMAGE,MINIMAX_H3_REFERENCE_IMAGE",
                                    "Reference image (downscaled to 2048 short edge if larger, "
                                    "never upscaled)", "ref_image_", 0, 9)),
            ("ref_videos", autogrow("ref_video", "IMAGE", "Reference video frames at 24 fps "
                                    "(2-15s)", "ref_video_", 0, 3)),
            ("ref_video_audios", autogrow("ref_video_audio", "AUDIO", "Soundtrack of the "
                                          "same-numbered reference video", "ref_video_audio_",
                                          0, 3)),
            ("ref_audios", autogrow("ref_audio", "AUDIO", "Standalone reference audio",
                                    "ref_audio_", 0, 3)),
        ],
        outputs=[("CONDITIONING", "positive"), ("LATENT", None)],
        description="<Picture i> / <Video k> / <Audio j> reference conditioning for MiniMax H3. "
                    "Use the same tags when prompting.")
    out["MiniMaxH3SigmaShift"] = v3_node(
        "MiniMaxH3SigmaShift", "ModelSamplingMiniMaxH3", "model/patch/minimax",
        [("model", ["MODEL", {}]),
         ("shift_video", ["FLOAT", {"default": 12.0, "min": 0.01, "max": 100.0, "step": 0.01}]),
         ("shift_audio", ["FLOAT", {"default": 3.0, "min": 0.01, "max": 100.0, "step": 0.01}])],
        outputs=[("MODEL", None)], description="Set the video/audio flow shifts.",
        search_aliases=["sigma shift", "minimax shift"])
    return out


CLIP_TYPES = ["stable_diffusion", "stable_cascade", "sd3", "stable_audio", "mochi", "ltxv",
              "pixart", "cosmos", "lumina2", "wan", "hidream", "chroma", "ace", "omnigen2",
              "qwen_image", "hunyuan_image", "flux2", "ovis", "longcat_image", "cogvideox", "lens",
              "pixeldit", "ideogram4", "boogu", "krea2", "joyimage", "mage", "minimax", "yue2"]


def newer_core(recorded):
    """The core classes whose newer source was read: the recorded entry with what changed."""
    out = {}
    clip = json.loads(json.dumps(recorded["CLIPLoader"]))
    clip["input"]["required"]["type"] = [CLIP_TYPES]
    clip["category"] = "model/loaders"
    clip["description"] = (
        "Recipes:\nsd: clip-l\nstable cascade: clip-g\nsd3: t5 xxl / clip-g / clip-l\nstable "
        "audio: t5 base\nmochi: t5 xxl\ncogvideox: t5 xxl (226-token padding)\ncosmos: old t5 "
        "xxl\nlumina2: gemma 2 2B\nwan: umt5 xxl\nhidream: llama-3.1 (Recommend) or t5\nomnigen2: "
        "qwen vl 2.5 3B\njoyimage: qwen3-vl 8B\nlens: gpt-oss-20b\npixeldit: gemma 2 2B "
        "elm\nminimax: MiniMax H3 Qwen3-VL or Music3 Qwen/RVQ")
    out["CLIPLoader"] = clip
    unet = json.loads(json.dumps(recorded["UNETLoader"]))
    unet["input"]["required"]["weight_dtype"] = [
        ["default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2"], {"advanced": True}]
    unet["category"] = "model/loaders"
    out["UNETLoader"] = unet
    dec = json.loads(json.dumps(recorded["VAEDecode"]))
    dec["input"]["required"] = {
        "samples": ["LATENT", {"tooltip": "The latent to be decoded."}],
        "vae": ["VAE", {"tooltip": "The VAE model used for decoding the latent."}]}
    dec["category"] = "model/latent"
    out["VAEDecode"] = dec
    aud = json.loads(json.dumps(recorded["VAEDecodeAudio"]))
    aud["category"] = "model/latent"
    out["VAEDecodeAudio"] = aud
    return out


COPIED = """VAELoader LoadImage LoadAudio KSampler KSamplerSelect BasicScheduler BasicGuider
CFGGuider RandomNoise SamplerCustomAdvanced CreateVideo SaveVideo ConditioningZeroOut
CLIPTextEncode""".split()


def v1_node(name, module, category, required, optional=None, outputs=(), display=None):
    """A custom pack's v1 class as server.py's node_info serialises it."""
    inp = {"required": dict(required)}
    if optional:
        inp["optional"] = dict(optional)
    return {"input": inp, "input_order": {k: list(v.keys()) for k, v in inp.items()},
            "output": [t for t, _ in outputs], "output_is_list": [False for _ in outputs],
            "output_name": [n if n else t for t, n in outputs], "name": name,
            "display_name": display or name, "description": "", "python_module": module,
            "category": category, "output_node": False}


def raylight_classes():
    """Raylight (komikndr/raylight, src/raylight/nodes.py and comfy_extra_dist/
    nodes_custom_sampler.py at c049571, nodes_minimax_h3.py at 55ea37bb) and the multi-GPU CLIP
    loader (H3MultiGPUCLIPLoader, a public H3 deployment's _h3mp pack).  XFuser_attention's
    choices are the members of Raylight's yunchang AttnType, which is not in the index: left
    empty, so its value is not checked.  Scheduler names: ComfyUI's, as in BasicScheduler."""
    mod = "custom_nodes.raylight"
    b = lambda d: ["BOOLEAN", {"default": d}]
    i = lambda d, **k: ["INT", {"default": d, **k}]
    sched = json.load(open(os.path.join(HERE, "recorded_object_info_v0.3.64.json")))[
        "BasicScheduler"]["input"]["required"]["scheduler"]
    ray = "RAY_ACTORS"
    out = {}
    out["RayInitializer"] = v1_node("RayInitializer", mod, "Raylight", [
        ("ray_cluster_address", ["STRING", {"default": "local"}]),
        ("ray_cluster_namespace", ["STRING", {"default": "default"}]),
        ("GPU", i(2)), ("ulysses_degree", i(2)), ("ring_degree", i(1)), ("cfg_degree", i(1)),
        ("dp_degree", i(1, min=0)), ("sync_ulysses", b(False)),
        ("clear_vram_after_sampling", b(False)), ("FSDP", b(False)),
        ("FSDP_CPU_OFFLOAD", b(False)), ("XFuser_attention", [[], {"default": "TORCH_FLASH"}]),
        ("skip_comm_test", b(False)), ("use_mmap", b(False))],
        outputs=[("RAY_ACTORS_INIT", "ray_actors_init")])
    out["RayUNETLoader"] = v1_node("RayUNETLoader", mod, "Raylight", [
        ("unet_name", [[]]),
        ("weight_dtype", [["default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2", "bf16",
                           "fp16"]]),
        ("ray_actors_init", ["RAY_ACTORS_INIT", {}])],
        optional=[("lora", ["RAY_LORA", {"default": None}])], outputs=[(ray, "ray_actors")])
    out["RayLoraLoader"] = v1_node("RayLoraLoader", mod, "Raylight", [
        ("lora_name", [[]]),
        ("strength_model", ["FLOAT", {"default": 1.0, "min": -100.0, "max": 100.0,
                                      "step": 0.01}])],
        optional=[("prev_ray_lora", ["RAY_LORA", {"default": None}])],
        outputs=[("RAY_LORA", "ray_lora")])
    out["RayMiniMaxH3SigmaShift"] = v1_node("RayMiniMaxH3SigmaShift", mod, "Raylight/extra", [
        ("ray_actors", [ray]),
        ("shift_video", ["FLOAT", {"default": 12.0, "min": 0.01, "max": 100.0, "step": 0.01}]),
        ("shift_audio", ["FLOAT", {"default": 3.0, "min": 0.01, "max": 100.0, "step": 0.01}])],
        outputs=[(ray, "ray_actors")])
    out["RayBasicScheduler"] = v1_node(
        "RayBasicScheduler", mod, "Raylight/extra/custom_sampling/schedulers", [
            ("ray_actors", [ray]), ("scheduler", sched),
            ("steps", i(20, min=1, max=10000)),
            ("denoise", ["FLOAT", {"default": 1.0, "min": 0.0, "max": 1.0, "step": 0.01}])],
        outputs=[("SIGMAS", None)])
    out["RayBasicGuider"] = v1_node(
        "RayBasicGuider", mod, "Raylight/extra/custom_sampling/guiders",
        [("ray_actors", [ray]), ("conditioning", ["CONDITIONING"])],
        outputs=[("RAY_GUIDER", "guider")])
    out["XFuserSamplerCustomAdvanced"] = v1_node(
        "XFuserSamplerCustomAdvanced", mod, "Raylight/extra/custom_sampling/samplers", [
            ("add_noise", b(True)),
            ("noise_seed", ["INT", {"default": 0, "min": 0, "max": 0xFFFFFFFFFFFFFFFF,
                                    "control_after_generate": True}]),
            ("guider", ["RAY_GUIDER"]), ("sampler", ["SAMPLER"]), ("sigmas", ["SIGMAS"]),
            ("latent_image", ["LATENT"])],
        outputs=[("LATENT", "output"), ("LATENT", "denoised_output"), (ray, "ray_actors")])
    out["H3MultiGPUCLIPLoader"] = v1_node(
        "H3MultiGPUCLIPLoader", "custom_nodes._h3mp", "model/loaders", [
            ("clip_name", [[]]), ("gpu_ids", ["STRING", {"default": "0,1,2,3"}]),
            ("offload_after_encode", b(True))],
        outputs=[("CLIP", None)], display="MiniMax H3 Multi-GPU CLIP Loader")
    return out


def main():
    recorded = json.load(open(os.path.join(HERE, "recorded_object_info_v0.3.64.json")))
    if sys.argv[1:] == ["--raylight"]:
        out = raylight_classes()
    else:
        out = {c: recorded[c] for c in COPIED}
        out.update(newer_core(recorded))
        out.update(h3_classes())
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
