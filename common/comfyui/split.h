#pragma once
// `h3pipe comfyui split`: a user's whole ComfyUI workflow (API format) cut at the latent into the
// two workflows the `comfyui` runtime queues, the inject map for each and a config snippet
// (docs/comfyui_split.md).
//
// The boundary: the sampler whose LATENT output reaches the VAE decode nodes (VAEDecode,
// VAEDecodeTiled, VAEDecodeAudio, ...), through latent-only ops (TrimVideoLatent, LTX-2's AV
// separate) which then run on the decode side.  An op that also needs the conditioning
// (LTXVCropGuides) stays with the sampler and the cut is after it.
//   sample = everything that cut depends on + the h3pipe save node on the cut LATENT(s)
//   decode = the h3pipe load node + what the decode graph's output nodes need, the decoders'
//            LATENT inputs rewired to the loader; nodes neither side needs are dropped.
// Node ids of the input are kept in both outputs; the save and load nodes get new ids.
//
// The latent profile comes from the graph: the node that made the sampler's starting latent
// (EmptyMiniMaxH3LatentAV, MiniMaxH3ImageToVideo, WanImageToVideo, EmptyLTXVLatentVideo, ...),
// else a conditioning node that names the model (MiniMaxH3AddGuide, ...); SplitOptions::profile,
// when given, is used instead.  A graph none of them tells is refused (comfyui.split.profile,
// naming the profiles to pass), never given h3pipe's `builtin` profile.
//
// Pure: no files, no HTTP.  Errors (code comfyui.split.* or comfyui.workflow.*) name the node and
// why; nothing is returned half-made.
#include <string>
#include <vector>

#include "common/comfyui/graph.h"
#include "common/comfyui/node_classes.h"
#include "common/comfyui/object_info.h"

namespace h3pipe::comfyui {

enum class Layout { kVideo, kVideoAudio, kAvNested };
const char* layout_name(Layout l);  // docs/latent.md h3pipe.layout: video | video+audio | av_nested

struct SplitOptions {
  const ObjectInfo* object_info = nullptr;  // optional: every class must be known to it
  HandoffNodes handoff;
  std::string workflow_dir = ".";  // how the config snippet names the two workflow files
  std::string sample_url = "http://127.0.0.1:8188";
  std::string decode_url = "http://127.0.0.1:8188";
  // The latent profile to use whatever the graph says (`--profile NAME`); "" = from the graph.
  std::string profile;
};

struct SplitResult {
  Json sample;   // API-format graph
  Json decode;   // API-format graph
  Json inject;   // {"sample": {param: target | [targets]}, "decode": {...}}
  Json snippet;  // {"latent_profile": p, "stages": {"encode"|"sample"|"decode": {"runtime": ...}}}
  std::string sampler;  // the boundary sampler's node id
  std::string save_node, load_node;
  std::string profile;       // the latent profile (never "")
  std::string profile_node;  // the node that decided it; "" when SplitOptions::profile did
  Layout layout = Layout::kVideo;
  std::vector<std::string> notes;  // what was guessed or left out, one sentence each
};

Result<SplitResult> split_workflow(const Json& api_graph, const SplitOptions& options);

// --- internal, shared by split.cpp and split_inject.cpp ---------------------------------------

struct SplitGraphs {
  const Json& whole;
  const ObjectInfo* object_info;
  const Json& sample;
  const Json& decode;
  std::string sampler, save_node, load_node, latent_source;
};
// Fills result.inject (and notes) for the two graphs already cut.
void find_inject(const SplitGraphs& g, const HandoffNodes& h, SplitResult& result);
// The name of output `slot` of node `id` (from object_info, else the built-in table), or "".
std::string output_name(const Json& g, const ObjectInfo* oi, const std::string& id, int slot);

}  // namespace h3pipe::comfyui
