#include "common/comfyui/split.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace h3pipe::comfyui {
namespace {

// Where a decoder's LATENT comes from.
struct Trace {
  std::string decoder;
  DecodeKind kind = DecodeKind::kVideo;
  bool fed = false;     // a sampler is behind it
  Slot cut;             // the LATENT output the save node takes
  std::string sampler;  // the sampler behind the cut
  std::string source;   // when !fed: the node the latent comes from ("" = not linked)
  bool through_av_separate = false;
};

bool is_output_node(const Json& g, const ObjectInfo* oi, const std::string& id) {
  std::string cls = class_of(g, id);
  if (oi)
    if (const auto* ci = oi->find(cls)) return ci->output_node;
  return is_known_output_node(cls);
}

// A class not in the tables that object_info shows to be a latent op: one linked LATENT input,
// a LATENT at the output used.
std::optional<PassThroughClass> generic_pass_through(const Json& g, const ObjectInfo* oi,
                                                     const std::string& id, int slot) {
  if (!oi) return std::nullopt;
  const auto* ci = oi->find(class_of(g, id));
  if (!ci || slot >= static_cast<int>(ci->output_types.size()) ||
      ci->output_types[slot] != "LATENT")
    return std::nullopt;
  PassThroughClass p;
  int latents = 0;
  const auto& in = g[id]["inputs"];
  for (const auto& spec : ci->inputs) {
    if (!in.contains(spec.name) || !is_link(in[spec.name])) continue;
    if (spec.type == "LATENT") {
      ++latents;
      p.latent_input = spec.name;
    } else {
      p.latent_only = false;
    }
  }
  if (latents != 1) return std::nullopt;
  return p;
}

// A class not in the tables that object_info shows to be a VAE decoder: a LATENT and a VAE in,
// IMAGE (video) or AUDIO out, such as a custom pack's tiled decoder.
std::optional<DecoderClass> generic_decoder(const ObjectInfo* oi, const std::string& cls) {
  if (!oi) return std::nullopt;
  const auto* ci = oi->find(cls);
  if (!ci) return std::nullopt;
  std::string latent;
  bool vae = false;
  for (const auto& in : ci->inputs) {
    if (in.type == "LATENT" && latent.empty()) latent = in.name;
    vae |= in.type == "VAE";
  }
  if (latent.empty() || !vae || ci->output_types.size() != 1) return std::nullopt;
  if (ci->output_types[0] == "IMAGE") return DecoderClass{DecodeKind::kVideo, latent};
  if (ci->output_types[0] == "AUDIO") return DecoderClass{DecodeKind::kAudio, latent};
  return std::nullopt;
}

Trace trace_decoder(const Json& g, const ObjectInfo* oi, const std::string& id,
                    const DecoderClass& dc) {
  Trace t;
  t.decoder = id;
  t.kind = dc.kind;
  const auto& in = g[id].value("inputs", Json::object());
  if (!in.contains(dc.latent_input) || !is_link(in[dc.latent_input])) return t;
  Slot at = link_of(in[dc.latent_input]);
  bool cut_set = false;
  for (std::size_t hops = 0; hops <= g.size(); ++hops) {
    std::string cls = class_of(g, at.node);
    const auto& node = g[at.node];
    if (is_sampler(cls, node)) {
      t.fed = true;
      t.sampler = at.node;
      if (!cut_set) t.cut = at;
      return t;
    }
    std::optional<PassThroughClass> p;
    if (const auto* k = pass_through_class(cls))
      p = *k;
    else
      p = generic_pass_through(g, oi, at.node, at.index);
    const auto& nin = node.value("inputs", Json::object());
    if (!p || !nin.contains(p->latent_input) || !is_link(nin[p->latent_input])) {
      t.source = at.node;
      return t;
    }
    if (p->av_separate && !cut_set) t.through_av_separate = true;
    if (!p->latent_only && !cut_set) {
      t.cut = at;
      cut_set = true;
    }
    at = link_of(nin[p->latent_input]);
  }
  t.source = at.node;
  return t;
}

// The frame rate the decode side writes (CreateVideo, SaveAnimatedWEBP, ...), else 24.
Json decode_fps(const Json& g) {
  for (const auto& id : topological_order(g)) {
    std::string k = fps_input(class_of(g, id));
    const auto& in = g[id].value("inputs", Json::object());
    if (!k.empty() && k != "frame_rate" && in.contains(k) && in[k].is_number()) return in[k];
  }
  return 24.0;
}

std::string decoder_names() {
  return "VAEDecode, VAEDecodeTiled, VAEDecodeAudio, VAEDecodeHunyuan3D, LTXVAudioVAEDecode";
}

// Two or more distinct cuts of one kind: which sampler feeds which decoder.
Error ambiguous(const Json& g, const std::vector<const Trace*>& ts, const char* what) {
  std::string list;
  std::set<Slot> seen;
  for (const Trace* t : ts) {
    if (!seen.insert(t->cut).second) continue;
    list += fmt::format("{}{} output {} -> {}", list.empty() ? "" : "; ", describe(g, t->sampler),
                        t->cut.index, describe(g, t->decoder));
    if (t->cut.node != t->sampler) list += fmt::format(" (through {})", describe(g, t->cut.node));
  }
  return make_error(errc::comfyui::kSplitAmbiguous,
                    "more than one {} latent reaches a decoder, so there is no single latent to "
                    "hand over: {}; keep one sampler branch per workflow",
                    what, list);
}

// The node that made the sampler's starting latent: up latent_image through chained samplers
// and latent ops.
std::string find_latent_source(const Json& g, const std::string& sampler) {
  std::string at = sampler;
  for (std::size_t hops = 0; hops <= g.size(); ++hops) {
    std::string cls = class_of(g, at);
    if (latent_source_class(cls)) return at;
    const auto& in = g[at].value("inputs", Json::object());
    std::string next;
    for (const char* k : {"latent_image", "samples", "latent", "av_latent"})
      if (in.contains(k) && is_link(in[k])) {
        next = in[k][0].get<std::string>();
        break;
      }
    if (next.empty()) return {};
    at = next;
  }
  return {};
}

// EmptyHunyuanLatentVideo serves Wan 2.1 and HunyuanVideo: tell them apart by the loaders.
std::string profile_from_loaders(const Json& sample) {
  for (auto it = sample.begin(); it != sample.end(); ++it) {
    const auto& in = it.value().value("inputs", Json::object());
    for (const char* k : {"unet_name", "ckpt_name", "type", "clip_name", "clip_name2"}) {
      if (!in.contains(k) || !in[k].is_string()) continue;
      std::string v = in[k].get<std::string>();
      std::transform(v.begin(), v.end(), v.begin(), ::tolower);
      if (v.find("hunyuan") != std::string::npos) return "hunyuanvideo";
      if (v.find("wan") != std::string::npos) return "wan2.1";
    }
  }
  return {};
}

std::string profiles_to_pass(const HandoffNodes& h) {
  std::string out;
  for (const auto& p : h.profiles)
    if (p != "builtin") out += (out.empty() ? "" : ", ") + p;
  return out;
}

// r.profile and r.profile_node: from the latent source, else a node that names the model, else
// refused; o.profile wins when given.
Status choose_profile(const Json& g, const Json& sample, const std::string& source,
                      const LatentSourceClass* ls, const SplitOptions& o, SplitResult& r) {
  std::string found, node;
  if (ls) {
    node = source;
    found = ls->profile.empty() ? profile_from_loaders(sample) : ls->profile;
    if (ls->profile.empty() && found.empty()) {
      found = "wan2.1";
      if (o.profile.empty())
        r.notes.push_back(fmt::format(
            "{} makes the Wan 2.1 / HunyuanVideo grid and no loader names either model; "
            "latent_profile wan2.1 assumed (the two grids are the same)",
            describe(g, source)));
    }
  } else {
    std::set<std::string> hinted;
    for (const auto& id : topological_order(sample)) {
      std::string p = profile_hint(class_of(sample, id));
      if (p.empty()) continue;
      if (hinted.insert(p).second && node.empty()) node = id;
    }
    if (hinted.size() == 1) {
      found = *hinted.begin();
      if (o.profile.empty())
        r.notes.push_back(fmt::format(
            "the latent of {} does not start at a known latent node; latent_profile {} from {}, "
            "which only that model has",
            describe(g, r.sampler), found, describe(g, node)));
    } else {
      node.clear();
    }
  }
  if (!o.profile.empty()) {
    if (o.profile == "builtin")
      return make_error(errc::comfyui::kSplitProfile,
                        "--profile builtin is h3pipe's own model's latent, which no ComfyUI graph "
                        "makes; pass one of: {}",
                        profiles_to_pass(o.handoff));
    if (!found.empty() && found != o.profile)
      r.notes.push_back(fmt::format("{} makes a {} latent; latent_profile {} as --profile asks",
                                    describe(g, node), found, o.profile));
    r.profile = o.profile;
    r.profile_node.clear();
    return Status::Ok();
  }
  if (found.empty())
    return make_error(errc::comfyui::kSplitProfile,
                      "cannot tell the latent profile: the latent of {} does not start at a known "
                      "latent node (EmptyMiniMaxH3LatentAV, MiniMaxH3ImageToVideo, "
                      "MiniMaxH3ReferenceToVideo, WanImageToVideo, Wan22ImageToVideoLatent, "
                      "EmptyHunyuanLatentVideo, HunyuanImageToVideo, EmptyLTXVLatentVideo, "
                      "LTXVImgToVideo, EmptyMochiLatentVideo, ...) and no node names the model; "
                      "pass --profile NAME, one of: {} (docs/latent.md)",
                      describe(g, r.sampler), profiles_to_pass(o.handoff));
  r.profile = found;
  r.profile_node = node;
  return Status::Ok();
}

Json settings_for(const std::string& url, const std::string& file, const Json& inject,
                  const std::string& output_node) {
  Json s = {{"url", url}, {"workflow", file}, {"inject", inject}};
  if (!output_node.empty()) s["output"] = {{"node", output_node}};
  return s;
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kVideo:
      return "video";
    case Layout::kVideoAudio:
      return "video+audio";
    case Layout::kAvNested:
      return "av_nested";
  }
  return "?";
}

std::string output_name(const Json& g, const ObjectInfo* oi, const std::string& id, int slot) {
  std::string cls = class_of(g, id);
  if (oi)
    if (const auto* ci = oi->find(cls))
      return slot < static_cast<int>(ci->output_names.size()) ? ci->output_names[slot] : "";
  const auto& k = known_output_names(cls);
  return slot < static_cast<int>(k.size()) ? k[slot] : "";
}

namespace {

// Every class must be one the server knows, when its /object_info is given.
Status check_classes_known(const Json& g, const ObjectInfo* oi) {
  if (!oi) return Status::Ok();
  for (const auto& id : topological_order(g))
    if (!oi->find(class_of(g, id)))
      return make_error(errc::comfyui::kSplitUnknownClass,
                        "{}: the server does not know class \"{}\" (not in its /object_info); "
                        "install the custom node pack that provides it, or remove the node",
                        describe(g, id), class_of(g, id));
  return Status::Ok();
}

// Every decoder node, and where its LATENT comes from.
Result<std::vector<Trace>> trace_decoders(const Json& g, const ObjectInfo* oi) {
  std::vector<Trace> traces;
  for (const auto& id : topological_order(g)) {
    std::optional<DecoderClass> dc;
    if (const auto* known = decoder_class(class_of(g, id)))
      dc = *known;
    else
      dc = generic_decoder(oi, class_of(g, id));
    if (dc) traces.push_back(trace_decoder(g, oi, id, *dc));
  }
  if (traces.empty())
    return make_error(errc::comfyui::kSplitNoDecoder,
                      "no VAE decode node ({}) in the workflow: h3pipe splits a workflow where a "
                      "sampler's LATENT is decoded, and this one decodes nothing",
                      decoder_names());
  return traces;
}

// The one video latent (and audio latent) the sample side hands over.
struct Cuts {
  Slot video;
  std::optional<Slot> audio;  // a separate audio latent (Layout::kVideoAudio) only
  const Trace* first_video = nullptr;
};

// The cuts, r.sampler and r.layout; refused when no sampler feeds a video decoder or when two
// latents of one kind do.
Result<Cuts> choose_cuts(const Json& g, const std::vector<Trace>& traces, SplitResult& r) {
  std::vector<const Trace*> video, audio;
  for (const auto& t : traces)
    if (t.fed) (t.kind == DecodeKind::kVideo ? video : audio).push_back(&t);
  if (video.empty()) {
    if (!audio.empty())
      return make_error(errc::comfyui::kSplitAudioOnly,
                        "{} decodes the audio latent of {}, but no sampler's latent reaches a "
                        "video decoder: an h3pipe latent carries a video",
                        describe(g, audio[0]->decoder), describe(g, audio[0]->sampler));
    std::string why;
    for (const auto& t : traces)
      why += fmt::format("{}{} {}", why.empty() ? "" : "; ", describe(g, t.decoder),
                         t.source.empty() ? std::string("has no linked LATENT input")
                                          : "decodes the latent of " + describe(g, t.source) +
                                                ", which is not a sampler");
    return make_error(errc::comfyui::kSplitNoSampler,
                      "no sampler (KSampler, SamplerCustomAdvanced, ...) feeds a decoder: {}", why);
  }
  std::set<Slot> vcuts, acuts;
  for (const auto* t : video) vcuts.insert(t->cut);
  for (const auto* t : audio) acuts.insert(t->cut);
  if (vcuts.size() > 1) return ambiguous(g, video, "video");
  if (acuts.size() > 1) return ambiguous(g, audio, "audio");

  Cuts c{*vcuts.begin(), std::nullopt, video[0]};
  r.sampler = video[0]->sampler;
  if (acuts.empty())
    r.layout = Layout::kVideo;
  else if (*acuts.begin() == c.video)
    r.layout = Layout::kAvNested;
  else
    r.layout = Layout::kVideoAudio;
  if (r.layout == Layout::kVideoAudio) c.audio = *acuts.begin();
  if (r.layout == Layout::kAvNested && !video[0]->through_av_separate)
    r.notes.push_back(fmt::format(
        "{} output {} is one AV latent (a NestedTensor of video and audio) decoded by a video and "
        "an audio decoder directly: on the decode side both take the loader's output 0, the whole "
        "AV latent, as in the workflow (core VAEDecode decodes its first tensor, VAEDecodeAudio "
        "its last)",
        describe(g, c.video.node), c.video.index));
  return c;
}

// The save node's inputs: the cut latents, and the profile and geometry it checks them against
// (the geometry is injected per job).
Json save_node_inputs(const Json& g, const HandoffNodes& h, const Cuts& cuts,
                      const std::string& source, const LatentSourceClass* ls, SplitResult& r) {
  bool profile_has_audio = std::find(h.audio_profiles.begin(), h.audio_profiles.end(), r.profile) !=
                           h.audio_profiles.end();
  std::string save_profile = "auto";
  if (!r.profile.empty() &&
      std::find(h.profiles.begin(), h.profiles.end(), r.profile) != h.profiles.end())
    save_profile = r.profile;
  if (r.layout != Layout::kVideo && !profile_has_audio) {
    save_profile = "none";
    r.notes.push_back(fmt::format(
        "the latent carries audio ({}), which profile {} has no rule for: the save node checks "
        "structure only (profile none); declare a profile with an audio rule in the config "
        "(latent_profiles, docs/latent.md)",
        layout_name(r.layout), r.profile.empty() ? "?" : r.profile));
  }
  Json save_inputs = {{h.save_video_input, make_link(cuts.video)},
                      {h.save_prefix_input, "h3pipe/latent"},
                      {h.save_profile_input, save_profile}};
  if (cuts.audio) save_inputs[h.save_audio_input] = make_link(*cuts.audio);
  if (!ls || save_profile == "auto" || save_profile == "none") return save_inputs;
  const auto& in = g[source].value("inputs", Json::object());
  for (const auto& [mine, theirs] : std::vector<std::pair<std::string, std::string>>{
           {h.width, ls->width}, {h.height, ls->height}, {h.frames, ls->frames}})
    if (!theirs.empty() && in.contains(theirs) && in[theirs].is_number_integer())
      save_inputs[mine] = in[theirs];
  if (save_inputs.contains(h.frames)) {
    long long asked = save_inputs[h.frames].get<long long>();
    long long made = ls->snapped_frames(asked);
    if (made != asked) {
      save_inputs[h.frames] = made;
      r.notes.push_back(fmt::format(
          "{} {} {} makes {} frames (ComfyUI snaps it up to {} + {}k): the save node checks {}, "
          "and jobs must ask for frames on that grid",
          describe(g, source), ls->frames, asked, made, ls->frame_min, ls->frame_step, made));
    }
  }
  if (save_inputs.contains(h.width) && save_inputs.contains(h.height) &&
      save_inputs.contains(h.frames)) {
    long long fps = std::lround(decode_fps(g).get<double>());  // the node's fps is an INT
    if (int only = profile_fps(r.profile); only > 0 && fps != only) {
      r.notes.push_back(fmt::format(
          "the decode side writes {} fps, but {} makes {} fps only: the save node checks {} fps",
          fps, r.profile, only, only));
      fps = only;
    }
    save_inputs[h.fps] = fps;
  } else {
    for (const auto& k : {h.width, h.height, h.frames}) save_inputs.erase(k);
  }
  return save_inputs;
}

// The sample side: the cuts' ancestors and the save node (r.sample); r.profile from where the
// latent starts.  The latent source node, "" when none is known.
Result<std::string> build_sample_side(const Json& g, const SplitOptions& o, const Cuts& cuts,
                                      const IdSet& sample_ids, SplitResult& r) {
  Json sample = Json::object();
  for (const auto& id : sample_ids) sample[id] = g[id];
  std::string source = find_latent_source(g, r.sampler);
  const LatentSourceClass* ls = source.empty() ? nullptr : latent_source_class(class_of(g, source));
  if (!ls) source.clear();
  H3_TRY(choose_profile(g, sample, source, ls, o, r));
  if (ls) {
    const auto& in = g[source].value("inputs", Json::object());
    if (!ls->batch.empty() && in.contains(ls->batch) && in[ls->batch] != 1)
      r.notes.push_back(fmt::format("{} has {} {}; h3pipe jobs are one video each (batch 1)",
                                    describe(g, source), ls->batch, in[ls->batch].dump()));
  }
  sample[r.save_node] = {{"class_type", o.handoff.save_class},
                         {"_meta", {{"title", "Save h3pipe latent"}}},
                         {"inputs", save_node_inputs(g, o.handoff, cuts, source, ls, r)}};
  r.sample = std::move(sample);
  return source;
}

// The nodes downstream of every fed decoder that write something (output nodes).
std::vector<std::string> decode_outputs(const Json& g, const ObjectInfo* oi,
                                        const std::vector<Trace>& traces) {
  auto users = consumers(g);
  IdSet downstream = make_id_set();
  std::vector<std::string> stack;
  for (const auto& t : traces)
    if (t.fed) stack.push_back(t.decoder);
  while (!stack.empty()) {
    auto id = stack.back();
    stack.pop_back();
    if (!downstream.insert(id).second) continue;
    for (auto it = users.lower_bound(Slot{id, 0}); it != users.end() && it->first.node == id; ++it)
      for (const auto& c : it->second) stack.push_back(c.node);
  }
  std::vector<std::string> outputs;
  for (const auto& id : downstream)
    if (is_output_node(g, oi, id)) outputs.push_back(id);
  return outputs;
}

// The decode side (r.decode): what the outputs need above the cuts, the cuts read from the load
// node instead.
Status build_decode_side(const Json& g, const ObjectInfo* oi, const HandoffNodes& h,
                         const std::vector<Trace>& traces, const Cuts& cuts,
                         const IdSet& sample_ids, SplitResult& r) {
  std::vector<std::string> outputs = decode_outputs(g, oi, traces);
  if (outputs.empty())
    return make_error(errc::comfyui::kSplitNoOutput,
                      "what {} decodes reaches no output node (SaveVideo, SaveAnimatedWEBP, "
                      "SaveAudio, ...): the decode workflow would write nothing",
                      describe(g, cuts.first_video->decoder));
  std::set<Slot> cut_set = {cuts.video};
  if (cuts.audio) cut_set.insert(*cuts.audio);
  IdSet decode_ids = ancestors(g, outputs, cut_set);
  Json decode = Json::object();
  IdSet shared = make_id_set();
  for (const auto& id : decode_ids) {
    std::string cls = class_of(g, id);
    if (is_sampler(cls, g[id]))
      return make_error(errc::comfyui::kSplitDecodeSamples,
                        "the decode side would run {} (a sampler) after the decoders; h3pipe "
                        "hands over one latent: split such a graph by hand",
                        describe(g, id));
    Json node = g[id];
    bool computes = false;
    if (node.contains("inputs")) {
      for (auto& v : node["inputs"]) {
        if (!is_link(v)) continue;
        Slot s = link_of(v);
        // One AV latent goes whole to both decoders (the loader's output 0), as the workflow
        // gave it: core VAEDecode takes latent.unbind()[0], VAEDecodeAudio latent.unbind()[-1].
        // Only a separate audio latent (video+audio) comes from the loader's audio output.
        if (cuts.audio && s == *cuts.audio)
          v = make_link({r.load_node, h.load_audio_output});
        else if (s == cuts.video)
          v = make_link({r.load_node, h.load_video_output});
        else
          computes = true;
      }
    }
    if (computes && sample_ids.count(id)) shared.insert(id);
    decode[id] = std::move(node);
  }
  decode[r.load_node] = {{"class_type", h.load_class},
                         {"_meta", {{"title", "Load h3pipe latent"}}},
                         {"inputs", {{h.load_path_input, "latent.h3latent"}}}};
  if (!shared.empty())
    r.notes.push_back(fmt::format(
        "nodes {} are computed on both sides (the decode graph needs them too)", join_ids(shared)));
  auto dropped = make_id_set();
  for (auto it = g.begin(); it != g.end(); ++it)
    if (!sample_ids.count(it.key()) && !decode_ids.count(it.key())) dropped.insert(it.key());
  if (!dropped.empty())
    r.notes.push_back(fmt::format("dropped nodes neither side needs: {}", join_ids(dropped)));
  for (auto it = decode.begin(); it != decode.end(); ++it)
    if (it.value()["class_type"] == "CheckpointLoaderSimple")
      r.notes.push_back(fmt::format(
          "the decode side loads the whole checkpoint of {} for its VAE; a VAELoader with the VAE "
          "file keeps the decode host light",
          describe(g, it.key())));
  r.decode = std::move(decode);
  return Status::Ok();
}

// The stages block of a config that runs the two workflows (r.snippet).
void config_snippet(const SplitOptions& o, SplitResult& r) {
  std::string out_node;
  for (auto it = r.decode.begin(); it != r.decode.end(); ++it)
    if (writes_mp4(it.value()["class_type"].get<std::string>(), it.value()) &&
        (out_node.empty() || id_less(it.key(), out_node)))
      out_node = it.key();
  if (out_node.empty())
    r.notes.push_back(
        "the decode workflow writes no MP4, and the decode stage keeps an .mp4: end it in "
        "CreateVideo -> SaveVideo (format mp4, codec h264) or VHS_VideoCombine (video/h264-mp4)");
  Json stages = {
      {"encode",
       {{"runtime",
         {{"name", "comfyui"}, {"settings", {{"url", o.sample_url}, {"fused", true}}}}}}},
      {"sample",
       {{"runtime",
         {{"name", "comfyui"},
          {"settings", settings_for(o.sample_url, join_path(o.workflow_dir, "sample.api.json"),
                                    r.inject["sample"], r.save_node)}}}}},
      {"decode",
       {{"runtime",
         {{"name", "comfyui"},
          {"settings", settings_for(o.decode_url, join_path(o.workflow_dir, "decode.api.json"),
                                    r.inject["decode"], out_node)}}}}}};
  r.snippet = {{"stages", stages}, {"latent_profile", r.profile}};
}

}  // namespace

Result<SplitResult> split_workflow(const Json& g, const SplitOptions& o) {
  H3_TRY(check_api_graph(g));
  H3_TRY(check_classes_known(g, o.object_info));
  auto traces = trace_decoders(g, o.object_info);
  if (!traces.ok()) return traces.error();
  SplitResult r;
  auto chosen = choose_cuts(g, *traces, r);
  if (!chosen.ok()) return chosen.error();
  const Cuts& cuts = *chosen;

  std::vector<std::string> roots = {cuts.video.node};
  if (cuts.audio) roots.push_back(cuts.audio->node);
  const IdSet sample_ids = ancestors(g, roots);
  const long long next = next_free_id(g);
  r.save_node = std::to_string(next);
  r.load_node = std::to_string(next + 1);
  auto source = build_sample_side(g, o, cuts, sample_ids, r);
  if (!source.ok()) return source.error();
  H3_TRY(build_decode_side(g, o.object_info, o.handoff, *traces, cuts, sample_ids, r));
  find_inject({g, o.object_info, r.sample, r.decode, r.sampler, r.save_node, r.load_node, *source},
              o.handoff, r);
  config_snippet(o, r);
  return r;
}

}  // namespace h3pipe::comfyui
