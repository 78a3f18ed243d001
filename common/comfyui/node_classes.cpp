#include "common/comfyui/node_classes.h"

#include <map>
#include <set>

namespace h3pipe::comfyui {

const DecoderClass* decoder_class(const std::string& cls) {
  static const std::map<std::string, DecoderClass> k = {
      {"VAEDecode", {DecodeKind::kVideo, "samples"}},
      {"VAEDecodeTiled", {DecodeKind::kVideo, "samples"}},
      {"VAEDecodeHunyuan3D", {DecodeKind::kVideo, "samples"}},
      {"VAEDecodeAudio", {DecodeKind::kAudio, "samples"}},
      // LTX-2 (ComfyUI after 0.3.64): the audio half of an AV latent.
      {"LTXVAudioVAEDecode", {DecodeKind::kAudio, "samples"}},
  };
  auto it = k.find(cls);
  return it == k.end() ? nullptr : &it->second;
}

bool is_sampler(const std::string& cls, const Json& node) {
  static const std::set<std::string> k = {"KSampler", "KSamplerAdvanced", "SamplerCustom",
                                          "SamplerCustomAdvanced"};
  if (k.count(cls)) return true;
  if (cls.find("Sampler") == std::string::npos || cls.find("SamplerSelect") != std::string::npos)
    return false;
  return node.contains("inputs") && node["inputs"].contains("latent_image");
}

const PassThroughClass* pass_through_class(const std::string& cls) {
  static const std::map<std::string, PassThroughClass> k = {
      {"TrimVideoLatent", {"samples", true, false}},
      {"LatentUpscaleBy", {"samples", true, false}},
      {"LatentUpscale", {"samples", true, false}},
      {"LTXVCropGuides", {"latent", false, false}},
      // LTX-2 (ComfyUI after 0.3.64): splits the AV latent into video and audio latents.
      {"LTXVSeparateAVLatent", {"av_latent", true, true}},
  };
  auto it = k.find(cls);
  return it == k.end() ? nullptr : &it->second;
}

const LatentSourceClass* latent_source_class(const std::string& cls) {
  static const std::map<std::string, LatentSourceClass> k = {
      // Wan 2.1 text-to-video and HunyuanVideo share this node (same 16-channel 4x8x8 grid).
      {"EmptyHunyuanLatentVideo", {"", "width", "height", "length", "batch_size"}},
      {"HunyuanImageToVideo", {"hunyuanvideo", "width", "height", "length", "batch_size"}},
      {"WanImageToVideo", {"wan2.1", "width", "height", "length", "batch_size"}},
      {"WanFirstLastFrameToVideo", {"wan2.1", "width", "height", "length", "batch_size"}},
      {"WanFunControlToVideo", {"wan2.1", "width", "height", "length", "batch_size"}},
      {"WanFunInpaintToVideo", {"wan2.1", "width", "height", "length", "batch_size"}},
      {"Wan22FunControlToVideo", {"wan2.1", "width", "height", "length", "batch_size"}},
      {"WanVaceToVideo", {"wan2.1", "width", "height", "length", "batch_size"}},
      {"WanCameraImageToVideo", {"wan2.1", "width", "height", "length", "batch_size"}},
      {"Wan22ImageToVideoLatent", {"wan2.2-5b", "width", "height", "length", "batch_size"}},
      {"EmptyLTXVLatentVideo", {"ltxv", "width", "height", "length", "batch_size"}},
      {"LTXVImgToVideo", {"ltxv", "width", "height", "length", "batch_size"}},
      {"EmptyMochiLatentVideo", {"mochi", "width", "height", "length", "batch_size"}},
      {"EmptyLatentAudio", {"", "", "", "", "batch_size", true}},
      // MiniMax H3 (ComfyUI core since Aug 2026, comfy_extras/nodes_minimax_h3.py): one AV
      // latent; the two conditioning nodes give it as output 1.  `length` snaps up to 17k+5.
      {"EmptyMiniMaxH3LatentAV", {"minimax-h3", "width", "height", "length", "", false, 17, 5}},
      {"MiniMaxH3ImageToVideo", {"minimax-h3", "width", "height", "length", "", false, 17, 5}},
      {"MiniMaxH3ReferenceToVideo", {"minimax-h3", "width", "height", "length", "", false, 17, 5}},
  };
  auto it = k.find(cls);
  return it == k.end() ? nullptr : &it->second;
}

long long LatentSourceClass::snapped_frames(long long frames) const {
  if (frame_step <= 0) return frames;
  if (frames < frame_min) frames = frame_min;
  long long over = (frames - frame_min) % frame_step;
  return over == 0 ? frames : frames + (frame_step - over);
}

std::string profile_hint(const std::string& cls) {
  static const std::map<std::string, std::string> k = {
      {"MiniMaxH3AddGuide", "minimax-h3"},
      {"MiniMaxH3SigmaShift", "minimax-h3"},
      {"MiniMaxH3TextEncoderOnlyReference", "minimax-h3"},
      {"RayMiniMaxH3SigmaShift", "minimax-h3"},  // Raylight
      {"TextEncodeHunyuanVideo_ImageToVideo", "hunyuanvideo"},
      // Not the LTX-Video nodes: LTX-2 (another profile) uses them too.
  };
  auto it = k.find(cls);
  return it == k.end() ? std::string() : it->second;
}

int profile_fps(const std::string& profile) {
  return profile == "minimax-h3" ? 24 : 0;
}

std::string conditioning_pass_through(const std::string& cls) {
  return cls == "MiniMaxH3AddGuide" ? "positive" : "";
}

const std::vector<std::string>& text_inputs(const std::string& cls) {
  static const std::map<std::string, std::vector<std::string>> k = {
      {"CLIPTextEncode", {"text"}},
      {"TextEncodeHunyuanVideo_ImageToVideo", {"prompt"}},
      {"CLIPTextEncodeFlux", {"clip_l", "t5xxl"}},
      {"CLIPTextEncodeSD3", {"clip_l", "clip_g", "t5xxl"}},
      {"CLIPTextEncodeHunyuanDiT", {"bert", "mt5xl"}},
      {"MiniMaxH3ImageToVideo", {"prompt"}},
      {"MiniMaxH3ReferenceToVideo", {"prompt"}},
  };
  static const std::vector<std::string> none;
  auto it = k.find(cls);
  return it == k.end() ? none : it->second;
}

std::string fps_input(const std::string& cls) {
  static const std::map<std::string, std::string> k = {
      {"CreateVideo", "fps"},
      {"SaveAnimatedWEBP", "fps"},
      {"SaveAnimatedPNG", "fps"},
      {"SaveWEBM", "fps"},
      {"LTXVConditioning", "frame_rate"},
      {"VHS_VideoCombine", "frame_rate"},
  };
  auto it = k.find(cls);
  return it == k.end() ? std::string() : it->second;
}

bool writes_mp4(const std::string& cls, const Json& node) {
  if (cls == "SaveVideo") return true;  // format auto and mp4 both write .mp4 (0.3.64)
  if (cls == "VHS_VideoCombine") {
    const auto& in = node.contains("inputs") ? node["inputs"] : Json::object();
    return in.contains("format") && in["format"].is_string() &&
           in["format"].get<std::string>().find("mp4") != std::string::npos;
  }
  return false;
}

bool is_known_output_node(const std::string& cls) {
  return cls.rfind("Save", 0) == 0 || cls.rfind("Preview", 0) == 0 || cls == "VHS_VideoCombine";
}

bool is_model_file_input(const std::string& cls, const std::string& input) {
  static const std::set<std::string> k = {"ckpt_name",
                                          "vae_name",
                                          "unet_name",
                                          "clip_name",
                                          "clip_name1",
                                          "clip_name2",
                                          "clip_name3",
                                          "clip_name4",
                                          "lora_name",
                                          "control_net_name",
                                          "style_model_name",
                                          "upscale_model_name",
                                          "gligen_name",
                                          "hypernetwork_name",
                                          "audio_encoder_name",
                                          "model_name",
                                          "photomaker_model_name"};
  return cls.find("Loader") != std::string::npos && k.count(input) != 0;
}

}  // namespace h3pipe::comfyui
