#pragma once
// What the splitter knows about node classes by name: which nodes sample, decode, carry a latent
// through, make the empty latent (and so say which latent profile it is), encode text, take an
// fps, load model files.  Core class names and input names are those of ComfyUI 0.3.64 (checked
// against tests/comfyui/recorded_object_info_v0.3.64.json); those of newer ComfyUI (LTX-2,
// MiniMax H3: tests/comfyui/object_info_minimax_h3_from_source.json) and of the seeds'
// custom packs are listed where they are known, and say so.
#include <string>
#include <vector>

#include "common/comfyui/object_info.h"

namespace h3pipe::comfyui {

enum class DecodeKind { kVideo, kAudio };

struct DecoderClass {
  DecodeKind kind;
  std::string latent_input;  // the input that takes the LATENT ("samples")
};
// VAEDecode, VAEDecodeTiled, VAEDecodeHunyuan3D, VAEDecodeAudio; LTX-2's LTXVAudioVAEDecode.
const DecoderClass* decoder_class(const std::string& cls);

// A node that denoises a latent: the core samplers by name; otherwise a class whose name holds
// "Sampler" (not "SamplerSelect") with a latent_image input, such as Raylight's
// XFuserSamplerCustomAdvanced.
bool is_sampler(const std::string& cls, const Json& node);

// Latent ops that may sit between a sampler and a decoder.  latent_only: the node needs nothing
// but the latent and its widgets, so it can run on the decode side; otherwise (LTXVCropGuides
// also takes the conditioning) it stays with the sampler and the cut is after it.
struct PassThroughClass {
  std::string latent_input;
  bool latent_only = true;
  bool av_separate = false;  // output 0 video, output 1 audio of one AV latent (LTX-2)
};
const PassThroughClass* pass_through_class(const std::string& cls);

// A node that makes the sampler's starting latent and so fixes the job's geometry.  Its LATENT
// may be any of its outputs (MiniMaxH3ImageToVideo: output 1; output 0 is the conditioning).
struct LatentSourceClass {
  std::string
      profile;  // docs/latent.md; "" = decided from the model loaders (wan2.1 | hunyuanvideo)
  std::string width, height, frames, batch;  // input names; "" where the node has none
  bool audio_only = false;                   // EmptyLatentAudio
  // ComfyUI snaps `frames` up to frame_min + k * frame_step (MiniMax H3: 5 + 17k); 0 = as given.
  int frame_step = 0, frame_min = 0;
  // The frames the node makes of a `frames` value (the snap above).
  long long snapped_frames(long long frames) const;
};
const LatentSourceClass* latent_source_class(const std::string& cls);

// Conditioning and model-patch nodes that name the model family without making the latent
// (MiniMaxH3AddGuide, MiniMaxH3SigmaShift, LTXVConditioning, ...): the latent profile when the
// latent source is not a known node.  "" when the class says nothing.
std::string profile_hint(const std::string& cls);

// The only frame rate a profile's model makes (minimax-h3: 24), 0 when any.
int profile_fps(const std::string& profile);

// A conditioning node that adds to the conditioning it is given (MiniMaxH3AddGuide: "positive"):
// the input the prompt text is behind.  "" when the class is not one.
std::string conditioning_pass_through(const std::string& cls);

// Text inputs of prompt encoders (CLIPTextEncode: text, TextEncodeHunyuanVideo_ImageToVideo:
// prompt, ...).  Empty when the class is not a text encoder.
const std::vector<std::string>& text_inputs(const std::string& cls);

// The fps input of video writers and of LTX-Video's conditioning (CreateVideo: fps,
// SaveAnimatedWEBP: fps, LTXVConditioning: frame_rate, VHS_VideoCombine: frame_rate).
std::string fps_input(const std::string& cls);

// Output nodes that write an MP4 (SaveVideo always does; VHS_VideoCombine with an mp4 format).
bool writes_mp4(const std::string& cls, const Json& node);
// Output nodes by name when no object_info says so (Save*, Preview*, VHS_VideoCombine).
bool is_known_output_node(const std::string& cls);

// Inputs that name a model file on the server (ckpt_name, vae_name, unet_name, clip_name,
// clip_name1.., lora_name, ...) of a loader class.
bool is_model_file_input(const std::string& cls, const std::string& input);

// Classes of h3pipe's node pack (integrations/comfyui/h3pipe_nodes; H3SaveAVLatent and
// H3LoadAVLatent are the same nodes under the names of the first templates).
struct HandoffNodes {
  std::string save_class = "H3SaveLatent";
  std::string save_video_input = "samples";  // the video LATENT, or the whole AV LATENT
  std::string save_audio_input = "audio";    // optional separate audio LATENT
  std::string save_prefix_input = "filename_prefix";
  std::string save_profile_input = "profile";  // "auto" | "none" | a built-in profile name
  // The save node's job geometry inputs (0 = derive from the latent); given, it checks exactly.
  std::string width = "width", height = "height", frames = "frames", fps = "fps";
  std::string load_class = "H3LoadLatent";
  std::string load_path_input = "path";
  int load_video_output = 0;  // "latent": the video LATENT, or the whole AV LATENT (av_nested)
  int load_audio_output = 1;  // "audio": the audio LATENT (video+audio and av_nested files)
  // Profiles the save node knows by name (its "profile" combo).
  std::vector<std::string> profiles = {"builtin", "wan2.1", "wan2.2-5b", "hunyuanvideo",
                                       "ltxv",    "mochi",  "ltx2",      "minimax-h3"};
  std::vector<std::string> audio_profiles = {"builtin", "ltx2", "minimax-h3"};  // with audio rule
};

}  // namespace h3pipe::comfyui
