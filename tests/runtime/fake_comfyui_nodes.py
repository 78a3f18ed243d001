"""The node classes FakeComfyUiServer knows, and what each "does".

Specs are ComfyUI's /object_info entries: the core classes come from a real 0.3.64 server
(fake_comfyui_core_nodes.json), the h3pipe node pack's from the same server with the pack
installed (tests/comfyui/recorded_object_info_h3pipe_nodes.json); the test nodes the
recording used (H3TestAVLatent, H3TestDelay) and the seeds' custom classes are declared here in the
same form.
Model-file and input-file lists are scanned from the fake's folders at every request, as
ComfyUI's folder_paths does.

A node runs as `run(ctx, node_id, inputs) -> (outputs tuple, ui dict or None)`. Values passed
between nodes are small dicts ({"type": "LATENT", "file": ...}); nothing is computed. Output
nodes write files into output/ with ComfyUI's naming (<prefix>_<counter:05>_.<ext>, the counter
one above the highest present, so a deleted file's name comes back).
Standard library only.
"""

import hashlib
import json
import mimetypes
import os
import re
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# A minimal ISO BMFF file (ftyp + empty mdat), used when the test gives no --mp4.
MP4_BYTES = (b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"
             b"\x00\x00\x00\x08mdat")


def _nonfinite(path):
    """(tensor, count, first index) of the first F32/F16 tensor holding NaN/Inf, else None."""
    import array
    import math
    import struct
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
            data = f.read()
    except (OSError, ValueError):
        return None
    for name, t in header.items():
        if name == "__metadata__" or t.get("dtype") not in ("F32", "F16"):
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "F32":
            vals = array.array("f")
            vals.frombytes(raw)
        else:
            vals = struct.unpack(f"<{len(raw) // 2}e", raw)
        bad = [i for i, v in enumerate(vals) if not math.isfinite(v)]
        if bad:
            return name, len(bad), bad[0]
    return None


class ExecutionError(Exception):
    """A node raised at run time; becomes an execution_error message in the history."""

    def __init__(self, node_id, node_type, exc_type, message, inputs=None):
        super().__init__(message)
        self.node_id, self.node_type, self.exc_type = node_id, node_type, exc_type
        self.inputs = inputs or {}


class Interrupted(Exception):
    def __init__(self, node_id, node_type):
        super().__init__("interrupted")
        self.node_id, self.node_type = node_id, node_type


def info(name, required, optional=None, output=(), output_name=None, output_node=False,
         category="h3pipe", module="custom_nodes.h3pipe_nodes", display=None):
    """An /object_info entry in ComfyUI's node_info() form."""
    inp = {"required": required}
    order = {"required": list(required)}
    if optional:
        inp["optional"] = optional
        order["optional"] = list(optional)
    return {"input": inp, "input_order": order, "output": list(output),
            "output_is_list": [False] * len(output), "output_name": list(output_name or output),
            "name": name, "display_name": display or name, "description": "",
            "python_module": module, "category": category, "output_node": output_node}


def _custom_specs(packs):
    s, i, f, b = (lambda d="": ["STRING", {"default": d}]), \
        (lambda d=0, lo=0, hi=2 ** 31: ["INT", {"default": d, "min": lo, "max": hi}]), \
        (lambda d=1.0, lo=-100.0, hi=100.0: ["FLOAT", {"default": d, "min": lo, "max": hi}]), \
        (lambda d=True: ["BOOLEAN", {"default": d}])
    seeds = "custom_nodes.seeds"
    # The h3pipe node pack (integrations/comfyui/h3pipe_nodes) exactly as a real 0.3.64 server
    # with the pack installed answered /object_info (recorded by the split's tests).
    with open(os.path.join(HERE, "..", "comfyui", "recorded_object_info_h3pipe_nodes.json")) as fh:
        specs = list(json.load(fh).values())
    specs += [
        # The test nodes the recording used.
        info("H3TestAVLatent", {"prompt": s(), "width": ["INT", {"default": 256, "min": 16, "max": 4096, "step": 16}],
                                "height": ["INT", {"default": 256, "min": 16, "max": 4096, "step": 16}],
                                "length": i(9, 1, 4096), "fps": i(24, 1, 240), "seed": i(0, 0, 2 ** 63),
                                "grid": [["h3pipe", "wan", "ltxv"]]}, output=["LATENT"]),
        info("H3TestDelay", {"samples": ["LATENT"], "seconds": f(1.0, 0.0, 3600.0)}, output=["LATENT"]),
    ]
    # The seeds' custom packs (configs/comfyui/sample_av_latent.api.json), only with --packs seeds:
    # a server without them rejects their classes, as the recorded one did.
    seeds_specs = [
        info("H3MultiGPUCLIPLoader", {"clip_name": s(), "type": s("minimax"), "devices": s("cuda:0"),
                                      "offload_after_encode": b()}, output=["CLIP"], module=seeds),
        info("MiniMaxH3ImageToVideo", {"clip": ["CLIP"], "vae": ["VAE"], "prompt": s(),
                                       "width": i(736, 16, 4096), "height": i(416, 16, 4096),
                                       "length": i(124, 1, 4096)}, {"first_frame": ["IMAGE"]},
             output=["CONDITIONING", "LATENT"], module=seeds),
        info("RayInitializer", {"ray_cluster_address": s(), "ray_cluster_namespace": s(), "GPU": i(1),
                                "ulysses_degree": i(1), "ring_degree": i(1), "cfg_degree": i(1),
                                "dp_degree": i(1), "FSDP": b(), "FSDP_CPU_OFFLOAD": b(False),
                                "XFuser_attention": s()}, {"load_after": ["*"]},
             output=["RAY_ACTORS_INIT"], module=seeds),
        info("RayUNETLoader", {"ray_actors_init": ["RAY_ACTORS_INIT"], "unet_name": s(), "weight_dtype": s()},
             {"load_after": ["*"]}, output=["RAY_ACTORS"], module=seeds),
        info("RayLoraLoader", {"ray_actors": ["RAY_ACTORS"], "lora_name": s(), "strength_model": f()},
             output=["RAY_ACTORS"], module=seeds),
        info("RayMiniMaxH3SigmaShift", {"ray_actors": ["RAY_ACTORS"], "shift_video": f(), "shift_audio": f()},
             output=["RAY_ACTORS"], module=seeds),
        info("RayBasicScheduler", {"ray_actors": ["RAY_ACTORS"], "scheduler": s(), "steps": i(6, 1, 10000),
                                   "denoise": f(1.0, 0.0, 1.0)}, output=["SIGMAS"], module=seeds),
        info("RayBasicGuider", {"ray_actors": ["RAY_ACTORS"], "conditioning": ["CONDITIONING"]},
             output=["GUIDER"], module=seeds),
        info("XFuserSamplerCustomAdvanced", {"add_noise": b(), "noise_seed": i(0, 0, 2 ** 64 - 1),
                                             "guider": ["GUIDER"], "sampler": ["SAMPLER"], "sigmas": ["SIGMAS"],
                                             "latent_image": ["LATENT"]}, output=["LATENT"], module=seeds),
        info("VHS_VideoCombine", {"images": ["IMAGE"], "frame_rate": f(24.0, 1.0, 240.0),
                                  "filename_prefix": s("AnimateDiff"), "format": s("video/h264-mp4")},
             {"audio": ["AUDIO"]}, output=["VHS_FILENAMES"], output_node=True, module=seeds),
    ]
    if "seeds" in packs:
        specs += seeds_specs
    return {x["name"]: x for x in specs}


# (class, input) -> models/ folder whose files make the input's list (ComfyUI's folder_paths).
MODEL_LISTS = {("VAELoader", "vae_name"): "vae", ("CLIPLoader", "clip_name"): "text_encoders",
               ("UNETLoader", "unet_name"): "diffusion_models",
               ("CheckpointLoaderSimple", "ckpt_name"): "checkpoints",
               ("LoraLoaderModelOnly", "lora_name"): "loras", ("CLIPVisionLoader", "clip_name"): "clip_vision"}


class NodeSet:
    def __init__(self, root, fixtures, packs=()):
        self.root = root
        self.fixtures = fixtures  # {"latent": path, "conditioning": path, "mp4": path}
        with open(os.path.join(HERE, "fake_comfyui_core_nodes.json")) as f:
            self.core = json.load(f)["classes"]
        self.custom = _custom_specs(packs)

    def names(self):
        return list(self.core) + list(self.custom)

    def has(self, cls):
        return cls in self.core or cls in self.custom

    def _files(self, folder, ext=None):
        d = os.path.join(self.root, folder)
        if not os.path.isdir(d):
            return []
        out = []
        for dirpath, _, files in os.walk(d):
            for name in files:
                rel = os.path.relpath(os.path.join(dirpath, name), d)
                if ext is None or name.endswith(ext):
                    out.append(rel)
        return sorted(out)

    def spec(self, cls):
        """The /object_info entry, with lists filled from the folders."""
        x = json.loads(json.dumps(self.core[cls] if cls in self.core else self.custom[cls]))
        req = x["input"]["required"]
        for (c, name), folder in MODEL_LISTS.items():
            if c == cls:
                files = self._files(os.path.join("models", folder))
                req[name][0] = files + (["pixel_space"] if cls == "VAELoader" else [])
        if cls == "LoadImage":
            d = os.path.join(self.root, "input")
            req["image"][0] = sorted(f for f in os.listdir(d) if os.path.isfile(os.path.join(d, f)))
        if cls == "LoadAudio":  # folder_paths.filter_files_content_types(..., ["audio", "video"])
            d = os.path.join(self.root, "input")
            req["audio"][0] = sorted(
                f for f in os.listdir(d) if os.path.isfile(os.path.join(d, f))
                and (mimetypes.guess_type(f)[0] or "").split("/")[0] in ("audio", "video"))
        if cls == "LoadLatent":
            req["latent"][0] = [f for f in self._files("input", ".latent") if "/" not in f]
        return x

    def output_node(self, cls):
        return bool((self.core.get(cls) or self.custom.get(cls))["output_node"])

    def return_types(self, cls):
        return (self.core.get(cls) or self.custom.get(cls))["output"]

    # ---- VALIDATE_INPUTS and IS_CHANGED ----------------------------------------------------
    def custom_validation(self, cls, inputs):
        """Names of inputs the class validates itself -> error text or None (VALIDATE_INPUTS)."""
        if cls == "LoadImage":
            image = str(inputs.get("image", ""))
            if not os.path.exists(self.input_path(image)):
                return {"image": f"Invalid image file: {image}"}
            return {"image": None}
        return {}

    def is_changed(self, cls, inputs):
        if cls in ("LoadImage", "H3LoadAVLatent", "H3LoadLatent", "LoadLatent", "H3LoadConditioning"):
            key = {"LoadImage": "image", "LoadLatent": "latent"}.get(cls, "path")
            p = self.input_path(str(inputs.get(key, "")))
            try:
                st = os.stat(p)
                return f"{st.st_mtime_ns}:{st.st_size}"
            except OSError:
                return "missing"
        return ""

    def node_error_type(self):
        """ComfyUI's full_type_name of the pack's NodeError: a custom node's module is named by its
        folder's path (nodes.load_custom_node), so the type reads like a path."""
        return os.path.join(self.root, "custom_nodes", "h3pipe_nodes") + ".nodes.NodeError"

    def input_path(self, name):
        # folder_paths.get_annotated_filepath: "name [output]" etc. are not used by h3pipe.
        return name if os.path.isabs(name) else os.path.join(self.root, "input", name)

    # ---- execution -------------------------------------------------------------------------
    def run(self, ctx, node_id, cls, inputs):
        if cls in ("H3LoadAVLatent", "H3LoadLatent", "H3LoadConditioning", "LoadLatent"):
            key = "latent" if cls == "LoadLatent" else "path"
            path = self.input_path(str(inputs.get(key, "")))
            if not os.path.isfile(path):
                raise ExecutionError(node_id, cls, "FileNotFoundError",
                                     f"[Errno 2] No such file or directory: '{path}'\n", {key: [inputs.get(key)]})
            with open(path, "rb") as f:
                head = f.read(8)
            if len(head) != 8 or int.from_bytes(head, "little") > os.path.getsize(path):
                raise ExecutionError(node_id, cls, "ValueError", f"{path} is not a safetensors file\n")
            kind = "CONDITIONING" if cls == "H3LoadConditioning" else "LATENT"
            if cls in ("H3LoadAVLatent", "H3LoadLatent", "H3LoadConditioning"):
                # As the pack does: the file must match the .sha256 beside it (or `sha256`).
                want = str(inputs.get("sha256") or "")
                if not want:
                    try:
                        with open(path + ".sha256") as f:
                            want = f.read().split()[0]
                    except (OSError, IndexError):
                        raise ExecutionError(node_id, cls, self.node_error_type(),
                                             f"{cls}: artifact.no_sidecar: {path}.sha256 is missing\n")
                with open(path, "rb") as f:
                    got = hashlib.sha256(f.read()).hexdigest()
                if got != want.lower():
                    raise ExecutionError(node_id, cls, self.node_error_type(),
                                         f"{cls}: artifact.mismatch: {path} hashes to {got}, expected {want}\n")
            if cls in ("H3LoadAVLatent", "H3LoadLatent"):  # (latent, audio), as the pack gives
                return ({"type": kind, "file": path}, {"type": kind, "file": path}), None
            return ({"type": kind, "file": path},), None
        if cls == "LoadImage":
            return ({"type": "IMAGE", "file": self.input_path(inputs["image"])}, {"type": "MASK"}), None
        if cls == "H3TestDelay":
            end = time.monotonic() + float(inputs.get("seconds", 0))
            while time.monotonic() < end:
                ctx.check_interrupt(node_id, cls)
                time.sleep(0.01)
            return (inputs.get("samples") or {"type": "LATENT"},), None
        if cls in ("H3SaveAVLatent", "H3SaveLatent", "SaveLatent"):
            src = (inputs.get("samples") or {}).get("file") or self.fixtures.get("latent")
            ext = ".latent" if cls == "SaveLatent" else ".h3latent"
            if cls != "SaveLatent" and src:  # as the pack does: NaN/Inf is refused, nothing written
                bad = _nonfinite(src)
                if bad:
                    raise ExecutionError(node_id, cls, self.node_error_type(),
                                         f"{cls}: latent.nonfinite: {bad[0]} holds {bad[1]} NaN/Inf "
                                         f"value(s), the first at index {bad[2]}; nothing was written\n")
            ref = self.save(inputs, ext, src=src)
            if cls != "SaveLatent":  # the pack writes a sidecar beside it and lists only the file
                path = os.path.join(self.root, "output", ref["subfolder"], ref["filename"])
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                with open(path + ".sha256", "w") as f:
                    f.write(f"{digest}  {ref['filename']}\n")
            return (), {"latents": [ref]}
        if cls == "H3SaveConditioning":
            src = (inputs.get("conditioning") or {}).get("file") or self.fixtures.get("conditioning")
            return (), {"conditioning": [self.save(inputs, ".safetensors", src=src)]}
        if cls == "SaveVideo":
            ref = self.save(inputs, ".mp4", src=self.fixtures.get("mp4"), data=MP4_BYTES)
            return (), {"images": [ref], "animated": [True]}
        if cls == "VHS_VideoCombine":
            ref = self.save(inputs, ".mp4", src=self.fixtures.get("mp4"), data=MP4_BYTES)
            ref.update({"format": "video/h264-mp4", "frame_rate": float(inputs.get("frame_rate", 24))})
            return ({"type": "VHS_FILENAMES"},), {"gifs": [ref]}
        if cls in ("SaveImage", "PreviewImage"):
            kind = "output" if cls == "SaveImage" else "temp"
            return (), {"images": [self.save(inputs, ".png", data=b"\x89PNG\r\n\x1a\n", kind=kind)]}
        # Everything else passes symbolic values on, one per declared output.
        upstream = next((v for v in inputs.values() if isinstance(v, dict) and v.get("file")), None)
        outs = []
        for t in self.return_types(cls):
            v = {"type": t}
            if upstream and t == upstream.get("type"):
                v["file"] = upstream["file"]
            outs.append(v)
        return tuple(outs), None

    def save(self, inputs, ext, src=None, data=None, kind="output"):
        """ComfyUI's get_save_image_path + write: <prefix>_<counter:05>_<ext>."""
        prefix = str(inputs.get("filename_prefix", "ComfyUI"))
        subfolder, _, base = prefix.rpartition("/")
        folder = os.path.join(self.root, kind, subfolder)
        os.makedirs(folder, exist_ok=True)
        pat = re.compile(re.escape(base) + r"_(\d+)_")
        counters = [int(m.group(1)) for n in os.listdir(folder) if (m := pat.match(n))]
        name = f"{base}_{max(counters, default=0) + 1:05}_{ext}"
        dest = os.path.join(folder, name)
        tmp = dest + ".tmp"
        if src:
            with open(src, "rb") as fi, open(tmp, "wb") as fo:
                fo.write(fi.read())
        else:
            with open(tmp, "wb") as fo:
                fo.write(data if data is not None else b"\x00" * 8 + b"{}")
        os.replace(tmp, dest)
        return {"filename": name, "subfolder": subfolder, "type": kind}
