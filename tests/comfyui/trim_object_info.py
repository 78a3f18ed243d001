#!/usr/bin/python3
"""Trims a GET /object_info dump of a real ComfyUI server to the core classes the split tests and
the templates use, so the tests run without a server.  Usage:
    trim_object_info.py FULL_DUMP.json > recorded_object_info_v0.3.64.json
The entries are copied unchanged (the server's own answer); only the class list is cut."""
import json
import sys

CLASSES = """
KSampler KSamplerAdvanced SamplerCustom SamplerCustomAdvanced KSamplerSelect BasicScheduler
RandomNoise DisableNoise BasicGuider CFGGuider DualCFGGuider LTXVScheduler LTXVConditioning
LTXVImgToVideo EmptyLTXVLatentVideo LTXVPreprocess LTXVAddGuide LTXVCropGuides
CheckpointLoaderSimple CLIPLoader DualCLIPLoader UNETLoader VAELoader LoraLoaderModelOnly
CLIPVisionLoader CLIPVisionEncode CLIPTextEncode TextEncodeHunyuanVideo_ImageToVideo
HunyuanImageToVideo EmptyHunyuanLatentVideo WanImageToVideo WanFirstLastFrameToVideo
Wan22ImageToVideoLatent EmptyMochiLatentVideo ModelSamplingSD3 FluxGuidance ConditioningZeroOut
VAEDecode VAEDecodeTiled VAEDecodeAudio VAEDecodeHunyuan3D VAEEncode EmptyLatentAudio
ConditioningStableAudio CreateVideo SaveVideo SaveAnimatedWEBP SaveAnimatedPNG SaveWEBM
SaveAudio SaveAudioMP3 PreviewAudio PreviewImage SaveImage SaveLatent LoadLatent TrimVideoLatent
LatentUpscaleBy LoadImage LoadAudio LoadVideo GetVideoComponents ImageScale EmptyLatentImage
""".split()

full = json.load(open(sys.argv[1]))
missing = [c for c in CLASSES if c not in full]
if missing:
    sys.exit("not in the dump: " + ", ".join(missing))
json.dump({c: full[c] for c in CLASSES}, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
