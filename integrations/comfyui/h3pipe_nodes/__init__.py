"""h3pipe's ComfyUI node pack: hand a workflow's latent (and conditioning) to h3pipe.

Install: `h3pipe comfyui install-nodes COMFYUI_DIR`, or copy/symlink this folder into
ComfyUI/custom_nodes/. See docs/comfyui.md.
"""
from .nodes import (H3LoadAVLatent, H3LoadConditioning, H3LoadLatent, H3SaveAVLatent,
                    H3SaveConditioning, H3SaveLatent)

__version__ = "2.0"

NODE_CLASS_MAPPINGS = {
    "H3SaveLatent": H3SaveLatent,
    "H3LoadLatent": H3LoadLatent,
    "H3SaveConditioning": H3SaveConditioning,
    "H3LoadConditioning": H3LoadConditioning,
    # names the configs/comfyui templates used first; the same nodes
    "H3SaveAVLatent": H3SaveAVLatent,
    "H3LoadAVLatent": H3LoadAVLatent,
}

NODE_DISPLAY_NAME_MAPPINGS = {
    "H3SaveLatent": "h3pipe Save Latent",
    "H3LoadLatent": "h3pipe Load Latent",
    "H3SaveConditioning": "h3pipe Save Conditioning",
    "H3LoadConditioning": "h3pipe Load Conditioning",
    "H3SaveAVLatent": "h3pipe Save Latent (H3SaveAVLatent)",
    "H3LoadAVLatent": "h3pipe Load Latent (H3LoadAVLatent)",
}

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
