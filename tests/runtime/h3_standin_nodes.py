"""Weight-free stand-ins for the ComfyUI classes a core MiniMax H3 workflow uses, executed for real
by FakeComfyUiServer --exec-python-nodes h3_standins (fake_comfyui_pynodes.py).

Written for h3pipe's tests from what ComfyUI's public source does (no ComfyUI code is copied):
- the latent nodes and their shapes follow comfy_extras/nodes_minimax_h3.py (`temporal_shape`,
  `_empty_av_latent`, EmptyMiniMaxH3LatentAV, MiniMaxH3ImageToVideo, MiniMaxH3ReferenceToVideo,
  MiniMaxH3SigmaShift): frames snap up to 17k+5, T' = 2 for F <= 5 else ((F - 5) // 17) * 5 + 2,
  video (B, 24, T', H/16, W/16), audio (B, 32, 2, round(F / 24 * 40)), one
  comfy.nested_tensor.NestedTensor((video, audio)) as the LATENT's "samples";
- NestedTensor follows comfy/nested_tensor.py (its API: .tensors, .is_nested, unbind, shape and
  dtype of the first stream, element-wise operators per stream);
- VAEDecode follows nodes.py VAEDecode (`if latent.is_nested: latent = latent.unbind()[0]`, a 5-D
  decode reshaped to [frames, H, W, 3]); VAEDecodeAudio follows comfy_extras/nodes_audio.py
  (`unbind()[-1]`, `decode(...).movedim(-1, 1)`, the std normalisation, the VAE's sample rate);
  the H3 audio VAE's 800 samples per latent step at 32 kHz is from comfy/ldm/minimax/audio_vae.py;
- the frame count a video latent decodes to is ComfyUI's H3 rule F = 17 * ((T' - 2) // 5) + 5
  (MiniMaxH3FunControlPatch.prepare_control_latent).

What is not ComfyUI's: the model. The loaders load nothing, the text encoder hashes the prompt,
the "sampler" is a deterministic function of its inputs seeded by noise_seed, and the VAE decode
is a pixel-space upsample of three latent channels and a tone per audio channel. The /object_info
specs are in h3_standin_specs.py.
"""
import hashlib
import math

import torch

import h3_standin_specs as specs

FPS = 24
AUDIO_LATENT_FPS = 40
AUDIO_SAMPLE_RATE = 32000   # MiniMaxH3AudioVAE.audio_sample_rate
AUDIO_UPSCALE = 800         # samples per audio latent step (32000 / 40)


class NestedTensor:
    """Several tensors passed as one LATENT "samples" (comfy/nested_tensor.py's API)."""

    def __init__(self, tensors):
        self.tensors = list(tensors)
        self.is_nested = True

    def _each(self, other, op):
        pairs = other.tensors if isinstance(other, NestedTensor) else [other] * len(self.tensors)
        return NestedTensor([op(t, o) for t, o in zip(self.tensors, pairs)])

    def __add__(self, b):
        return self._each(b, lambda x, y: x + y)

    def __sub__(self, b):
        return self._each(b, lambda x, y: x - y)

    def __mul__(self, b):
        return self._each(b, lambda x, y: x * y)

    def __truediv__(self, b):
        return self._each(b, lambda x, y: x / y)

    def __getitem__(self, *args, **kwargs):
        return self._each(None, lambda x, _: x.__getitem__(*args, **kwargs))

    def unbind(self):
        return self.tensors

    def to(self, *args, **kwargs):
        return NestedTensor([t.to(*args, **kwargs) for t in self.tensors])

    def new_ones(self, *args, **kwargs):
        return self.tensors[0].new_ones(*args, **kwargs)

    def float(self):
        return self.to(dtype=torch.float)

    def chunk(self, *args, **kwargs):
        return self._each(None, lambda x, _: x.chunk(*args, **kwargs))

    def size(self):
        return self.tensors[0].size()

    @property
    def shape(self):
        return self.tensors[0].shape

    @property
    def ndim(self):
        return max(t.ndim for t in self.tensors)

    @property
    def device(self):
        return self.tensors[0].device

    @property
    def dtype(self):
        return self.tensors[0].dtype

    @property
    def layout(self):
        return self.tensors[0].layout


# ---- ComfyUI's H3 shape rules -------------------------------------------------------------------
def align_frame_count(n):
    return n + (5 - n % 17) % 17


def video_latent_t(frames):
    return 2 if frames <= 5 else ((frames - 5) // 17) * 5 + 2


def temporal_shape(length):
    frames = align_frame_count(max(5, length))
    return frames, video_latent_t(frames), round(frames / FPS * AUDIO_LATENT_FPS)


def frames_of_latent_t(latent_t):
    return 17 * ((latent_t - 2) // 5) + 5


def empty_av_latent(width, height, length, batch_size=1):
    frames, latent_t, audio_t = temporal_shape(length)
    video = torch.zeros([batch_size, 24, latent_t, height // 16, width // 16])
    audio = torch.zeros([batch_size, 32, 2, audio_t])
    return {"samples": NestedTensor((video, audio))}, frames


def _streams(samples):
    return list(samples.unbind()) if getattr(samples, "is_nested", False) else [samples]


def _seed_of(text):
    return int.from_bytes(hashlib.sha256(str(text).encode()).digest()[:8], "little") & (2 ** 63 - 1)


# ---- models: named, weightless ------------------------------------------------------------------
class StandInModel:
    def __init__(self, name, options=None):
        self.name, self.options = name, dict(options or {})

    def clone(self):
        return StandInModel(self.name, self.options)


class StandInClip:
    """A text encoder: the prompt's SHA-256 seeds the hidden states."""

    def __init__(self, name, type_):
        self.name, self.type = name, type_

    def tokenize(self, text, **kwargs):
        return {"text": str(text), "extras": sorted(kwargs)}

    def encode_from_tokens_scheduled(self, tokens):
        g = torch.Generator().manual_seed(_seed_of(tokens["text"]))
        cond = torch.randn([1, 8, 64], generator=g)
        return [[cond, {"pooled_output": cond.mean(dim=1)}]]


class StandInVAE:
    """One class for the video and the audio VAE, told apart by the latent's rank."""

    audio_sample_rate = AUDIO_SAMPLE_RATE

    def __init__(self, name):
        self.name = name

    def encode(self, pixels):  # [B, H, W, C] -> [B, 24, 1, H/16, W/16]
        b, h, w = pixels.shape[0], pixels.shape[1], pixels.shape[2]
        small = pixels[..., :3].movedim(-1, 1)[:, :, ::16, ::16].mean(dim=1, keepdim=True)
        return small.unsqueeze(2).repeat(1, 24, 1, 1, 1)[:, :, :, :h // 16, :w // 16].reshape(
            b, 24, 1, h // 16, w // 16)

    def decode(self, latent):
        if latent.ndim == 5:
            return self._decode_video(latent)
        if latent.ndim == 4:
            return self._decode_audio(latent)
        raise ValueError(f"StandInVAE {self.name}: cannot decode a {latent.ndim}-D latent "
                         f"{tuple(latent.shape)}")

    @staticmethod
    def _decode_video(z):  # [B, C, T', H', W'] -> [B, F, 16 H', 16 W', 3] in [0, 1]
        b, _, t, _, _ = z.shape
        frames = frames_of_latent_t(t)
        index = torch.tensor([min(t - 1, f * t // frames) for f in range(frames)])
        rgb = torch.sigmoid(z[:, :3].float()).index_select(2, index)        # [B, 3, F, H', W']
        rgb = rgb.repeat_interleave(16, dim=3).repeat_interleave(16, dim=4)  # pixel space
        return rgb.permute(0, 2, 3, 4, 1).contiguous()

    @staticmethod
    def _decode_audio(z):  # [B, 32, 2, T40] -> [B, T40 * 800, 2]
        level = torch.tanh(z.float().mean(dim=1))                           # [B, 2, T40]
        envelope = level.repeat_interleave(AUDIO_UPSCALE, dim=2)            # [B, 2, L]
        n = envelope.shape[-1]
        t = torch.arange(n, dtype=torch.float32) / AUDIO_SAMPLE_RATE
        tones = torch.stack([torch.sin(2 * math.pi * 440.0 * t), torch.sin(2 * math.pi * 660.0 * t)])
        return (0.25 * (0.5 + 0.5 * envelope) * tones).movedim(1, -1)


# ---- sampling -----------------------------------------------------------------------------------
class StandInNoise:
    def __init__(self, seed):
        self.seed = seed

    def generate_noise(self, latent):
        return [torch.randn(t.shape, generator=torch.Generator().manual_seed(self.seed + i))
                for i, t in enumerate(_streams(latent["samples"]))]


class StandInGuider:
    def __init__(self, model, conds, cfg=1.0):
        self.model, self.conds, self.cfg = model, conds, cfg

    def bias(self):
        """A number each conditioning and the model's options move."""
        total = 0.0
        for conditioning in self.conds:
            for cond, _ in conditioning:
                total += float(cond.float().mean())
        shift = float(self.model.options.get("shift_video", 1.0)) if self.model else 1.0
        return 0.1 * math.tanh(total) + 0.01 * shift + 0.001 * self.cfg


def standin_sample(noise, guider, sigmas, latent):
    """The sampler's stand-in: per stream x = start + noise * sigma0, then each step pulls x towards
    tanh(x) + the guider's bias by sigma_{k+1} / sigma_k: deterministic, finite, same layout."""
    starts = _streams(latent["samples"])
    noises = noise.generate_noise(latent)
    bias = guider.bias()
    s = [float(v) for v in sigmas]
    out = []
    for start, n in zip(starts, noises):
        x = start.float() + n * (s[0] if s else 1.0)
        for k in range(len(s) - 1):
            denoised = torch.tanh(x) * 0.5 + bias
            ratio = s[k + 1] / s[k] if s[k] else 0.0
            x = denoised + (x - denoised) * ratio
        out.append(x)
    samples = NestedTensor(out) if getattr(latent["samples"], "is_nested", False) else out[0]
    return {**latent, "samples": samples}


# ---- the node classes (FUNCTION names as ComfyUI's) ---------------------------------------------
class _Node:
    @classmethod
    def INPUT_TYPES(cls):
        return specs.SPECS[cls.__name__]["input"]


class UNETLoader(_Node):
    FUNCTION = "load_unet"

    def load_unet(self, unet_name, weight_dtype="default"):
        return (StandInModel(unet_name, {"weight_dtype": weight_dtype}),)


class CLIPLoader(_Node):
    FUNCTION = "load_clip"

    def load_clip(self, clip_name, type="stable_diffusion", device="default"):  # noqa: A002
        return (StandInClip(clip_name, type),)


class VAELoader(_Node):
    FUNCTION = "load_vae"

    def load_vae(self, vae_name):
        return (StandInVAE(vae_name),)


class EmptyMiniMaxH3LatentAV(_Node):
    FUNCTION = "execute"

    def execute(self, width, height, length):
        return (empty_av_latent(width, height, length)[0],)


class MiniMaxH3ImageToVideo(_Node):
    FUNCTION = "execute"

    def execute(self, clip, vae, prompt, width, height, length, first_frame=None, last_frame=None):
        latent, frames = empty_av_latent(width, height, length)
        images = [i for i in (first_frame, last_frame) if i is not None]
        cond = clip.encode_from_tokens_scheduled(clip.tokenize(prompt, images=images))
        keyframes = []
        for index, image in ((0, first_frame), (frames - 1, last_frame)):
            if image is not None:
                keyframes.append({"resolved_frame_index": index, "latent": vae.encode(image[:1])})
        if keyframes:
            cond = [[c, {**o, "minimax_keyframes": keyframes}] for c, o in cond]
        return (cond, latent)


class MiniMaxH3ReferenceToVideo(_Node):
    FUNCTION = "execute"

    def execute(self, clip, prompt, width, height, length, ref_image_size="match", vae=None,
                audio_vae=None, **refs):
        latent, _ = empty_av_latent(width, height, length)
        given = sorted(k for k, v in refs.items() if v is not None)
        # The references condition the model: their contents (pictures, the voice's waveform)
        # seed the stand-in's conditioning with the prompt, so another voice is another video.
        m = hashlib.sha256(str(prompt).encode())
        for k in given:
            v = refs[k]
            t = v["waveform"] if isinstance(v, dict) and "waveform" in v else v
            m.update(k.encode())
            if isinstance(t, torch.Tensor):
                m.update(t.float().contiguous().numpy().tobytes())
        text = f"{prompt}\n{m.hexdigest()}" if given else prompt
        cond = clip.encode_from_tokens_scheduled(clip.tokenize(text, minimax_ref_items=given))
        return (cond, latent)


class MiniMaxH3SigmaShift(_Node):
    FUNCTION = "execute"

    def execute(self, model, shift_video, shift_audio):
        m = model.clone()
        m.options.update(shift_video=shift_video, shift_audio=shift_audio)
        return (m,)


class RandomNoise(_Node):
    FUNCTION = "get_noise"

    def get_noise(self, noise_seed):
        return (StandInNoise(int(noise_seed)),)


class KSamplerSelect(_Node):
    FUNCTION = "get_sampler"

    def get_sampler(self, sampler_name):
        return ({"sampler": sampler_name},)


class BasicScheduler(_Node):
    FUNCTION = "get_sigmas"

    def get_sigmas(self, model, scheduler, steps, denoise):
        if denoise <= 0:
            return (torch.FloatTensor([]),)
        total = int(steps / denoise) if denoise < 1 else steps
        shift = float(model.options.get("shift_video", 1.0))
        t = torch.linspace(1.0, 0.0, total + 1)[-(steps + 1):]
        return (shift * t / (1 + (shift - 1) * t),)


class BasicGuider(_Node):
    FUNCTION = "get_guider"

    def get_guider(self, model, conditioning):
        return (StandInGuider(model, [conditioning]),)


class CFGGuider(_Node):
    FUNCTION = "get_guider"

    def get_guider(self, model, positive, negative, cfg):
        return (StandInGuider(model, [positive, negative], cfg),)


class SamplerCustomAdvanced(_Node):
    FUNCTION = "sample"

    def sample(self, noise, guider, sampler, sigmas, latent_image):
        out = standin_sample(noise, guider, sigmas, latent_image)
        return (out, out)


class VAEDecode(_Node):
    FUNCTION = "decode"

    def decode(self, vae, samples):
        latent = samples["samples"]
        if getattr(latent, "is_nested", False):
            latent = latent.unbind()[0]
        images = vae.decode(latent)
        if images.ndim == 5:
            images = images.reshape(-1, images.shape[-3], images.shape[-2], images.shape[-1])
        return (images,)


class VAEDecodeAudio(_Node):
    FUNCTION = "decode"

    def decode(self, vae, samples):
        latent = samples["samples"]
        if getattr(latent, "is_nested", False):
            latent = latent.unbind()[-1]
        audio = vae.decode(latent).movedim(-1, 1)
        std = torch.std(audio, dim=[1, 2], keepdim=True) * 5.0
        std[std < 1.0] = 1.0
        return ({"waveform": audio / std, "sample_rate": int(vae.audio_sample_rate)},)


class H3TestNestedProbe(_Node):
    """A test node (not ComfyUI's): reports what a LATENT's "samples" is, so a test can compare
    servers: the class, is_nested, and per stream the shape, dtype and SHA-256 of the bytes."""
    FUNCTION = "probe"
    OUTPUT_NODE = True

    def probe(self, samples):
        s = samples["samples"]
        streams = []
        for t in _streams(s):
            c = t.detach().cpu().contiguous()
            streams.append({"shape": list(c.shape), "dtype": str(c.dtype),
                            "sha256": hashlib.sha256(c.numpy().tobytes()).hexdigest()})
        kind = type(s)
        return {"ui": {"nested": [{"class": f"{kind.__module__}.{kind.__qualname__}",
                                   "is_nested": bool(getattr(s, "is_nested", False)),
                                   "shape": list(s.shape), "streams": streams}]}, "result": ()}


NODE_CLASS_MAPPINGS = {c.__name__: c for c in (H3TestNestedProbe, 
    UNETLoader, CLIPLoader, VAELoader, EmptyMiniMaxH3LatentAV, MiniMaxH3ImageToVideo,
    MiniMaxH3ReferenceToVideo, MiniMaxH3SigmaShift, RandomNoise, KSamplerSelect, BasicScheduler,
    BasicGuider, CFGGuider, SamplerCustomAdvanced, VAEDecode, VAEDecodeAudio)}
