"""ComfyUI's NestedTensor (comfy/nested_tensor.py, newer than 0.3.64): one LATENT whose
"samples" carries several streams, e.g. MiniMax H3's and LTX-2's [video, audio].

Detected by duck typing, so any object with ComfyUI's API works. On load the real class is
used when ComfyUI has it (looked up at each load, so a module that appears later is found);
otherwise `NestedTensorStandIn`, which has the same API. Core VAEDecode decodes unbind()[0],
VAEDecodeAudio unbind()[-1]: the stream order is the one saved.
"""
import importlib

import torch

from .latent_file import LatentError


def comfy_class():
    """comfy.nested_tensor.NestedTensor when this ComfyUI has it, else None (0.3.64, or outside
    ComfyUI)."""
    try:
        return importlib.import_module("comfy.nested_tensor").NestedTensor
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None


def is_nested(samples):
    """True for a NestedTensor-like value: `.is_nested` true and a list of tensors."""
    if isinstance(samples, torch.Tensor):
        return False  # torch's own nested tensors are not what ComfyUI passes
    return bool(getattr(samples, "is_nested", False)) and (
        hasattr(samples, "tensors") or hasattr(samples, "unbind"))


def streams(samples):
    """The tensors of a NestedTensor-like value, in order. Raises LatentError."""
    ts = getattr(samples, "tensors", None)
    if ts is None:
        ts = samples.unbind()
    if not isinstance(ts, (list, tuple)):
        raise LatentError("latent.type", f"the NestedTensor's streams are a {type(ts).__name__}, "
                          "not a list of tensors")
    ts = list(ts)
    for i, t in enumerate(ts):
        if not isinstance(t, torch.Tensor):
            raise LatentError("latent.type", f"NestedTensor stream {i} is a "
                              f"{type(t).__name__}, not a tensor")
    return ts


class NestedTensorStandIn:
    """The API of comfy.nested_tensor.NestedTensor, for ComfyUI versions without it."""

    def __init__(self, tensors):
        self.tensors = list(tensors)
        self.is_nested = True

    def _copy(self):
        return NestedTensorStandIn(self.tensors)

    def apply_operation(self, other, operation):
        o = self._copy()
        for i, t in enumerate(o.tensors):
            o.tensors[i] = operation(t, other.tensors[i] if isinstance(other, NestedTensorStandIn)
                                     else other)
        return o

    def __add__(self, b):
        return self.apply_operation(b, lambda x, y: x + y)

    def __sub__(self, b):
        return self.apply_operation(b, lambda x, y: x - y)

    def __mul__(self, b):
        return self.apply_operation(b, lambda x, y: x * y)

    def __truediv__(self, b):
        return self.apply_operation(b, lambda x, y: x / y)

    def __getitem__(self, *args, **kwargs):
        return self.apply_operation(None, lambda x, y: x.__getitem__(*args, **kwargs))

    def unbind(self):
        return self.tensors

    def to(self, *args, **kwargs):
        o = self._copy()
        o.tensors = [t.to(*args, **kwargs) for t in o.tensors]
        return o

    def new_ones(self, *args, **kwargs):
        return self.tensors[0].new_ones(*args, **kwargs)

    def float(self):
        return self.to(dtype=torch.float)

    def chunk(self, *args, **kwargs):
        return self.apply_operation(None, lambda x, y: x.chunk(*args, **kwargs))

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


def make_nested(tensors):
    """A NestedTensor of `tensors`: ComfyUI's class when importable, else the stand-in."""
    cls = comfy_class() or NestedTensorStandIn
    return cls(list(tensors))
