// The inject map of a split: which widget of which node receives each job parameter, found from
// the core classes the graph uses (node_classes.h).
#include <map>

#include "common/comfyui/split.h"

namespace h3pipe::comfyui {
namespace {

struct Target {
  std::string node, input;
  auto operator<=>(const Target&) const = default;
};

// param -> targets, in a stable order.
class InjectMap {
 public:
  void add(const std::string& param, const std::string& node, const std::string& input) {
    auto& v = m_[param];
    Target t{node, input};
    if (std::find(v.begin(), v.end(), t) == v.end()) v.push_back(t);
  }
  bool has(const std::string& p) const { return m_.count(p) != 0; }
  void erase(const std::string& p) { m_.erase(p); }
  const std::vector<Target>* get(const std::string& p) const {
    auto it = m_.find(p);
    return it == m_.end() ? nullptr : &it->second;
  }
  Json to_json() const {
    Json j = Json::object();
    for (const auto& [p, ts] : m_) {
      auto sorted = ts;
      std::sort(sorted.begin(), sorted.end(), [](const Target& a, const Target& b) {
        return a.node != b.node ? id_less(a.node, b.node) : a.input < b.input;
      });
      Json arr = Json::array();
      for (const auto& t : sorted) arr.push_back({{"node", t.node}, {"input", t.input}});
      j[p] = arr.size() == 1 ? arr[0] : arr;
    }
    return j;
  }

 private:
  std::map<std::string, std::vector<Target>> m_;
};

const Json& inputs_of(const Json& g, const std::string& id) {
  static const Json kEmpty = Json::object();
  return g.contains(id) && g[id].contains("inputs") ? g[id]["inputs"] : kEmpty;
}

bool is_widget_value(const Json& in, const std::string& name) {
  return in.contains(name) && !is_link(in[name]);
}

// The text widgets that the conditioning at `from` was encoded from.
std::vector<Target> trace_text(const Json& g, const ObjectInfo* oi, Slot from) {
  for (std::size_t hops = 0; hops <= g.size(); ++hops) {
    if (!g.contains(from.node)) return {};
    std::string cls = class_of(g, from.node);
    const auto& in = inputs_of(g, from.node);
    const auto& texts = text_inputs(cls);
    if (!texts.empty()) {
      std::vector<Target> out;
      for (const auto& t : texts) {
        if (is_widget_value(in, t)) {
          out.push_back({from.node, t});
        } else if (in.contains(t) && is_link(in[t])) {
          // A text that comes from a primitive string node: write into that node.
          Slot s = link_of(in[t]);
          if (is_widget_value(inputs_of(g, s.node), "value")) out.push_back({s.node, "value"});
        }
      }
      return out;
    }
    if (cls == "ConditioningZeroOut") return {};  // an empty negative: no text to write
    if (std::string p = conditioning_pass_through(cls); !p.empty()) {
      if (!in.contains(p) || !is_link(in[p])) return {};
      from = link_of(in[p]);
      continue;
    }
    std::string name = output_name(g, oi, from.node, from.index);
    std::string next;
    if ((name == "positive" || name == "negative") && in.contains(name))
      next = name;
    else if (in.contains("conditioning"))
      next = "conditioning";
    if (next.empty() || !is_link(in[next])) return {};
    from = link_of(in[next]);
  }
  return {};
}

// The conditioning links a sampler takes as positive and negative (directly, or through its
// guider: CFGGuider positive/negative, BasicGuider conditioning, DualCFGGuider cond1/negative).
void conditioning_of(const Json& g, const std::string& sampler, std::vector<Slot>& pos,
                     std::vector<Slot>& neg) {
  auto take = [&](const Json& in, const char* k, std::vector<Slot>& out) {
    if (in.contains(k) && is_link(in[k])) out.push_back(link_of(in[k]));
  };
  const auto& in = inputs_of(g, sampler);
  take(in, "positive", pos);
  take(in, "negative", neg);
  if (in.contains("guider") && is_link(in["guider"])) {
    const auto& gi = inputs_of(g, in["guider"][0].get<std::string>());
    take(gi, "positive", pos);
    take(gi, "conditioning", pos);
    take(gi, "cond1", pos);
    take(gi, "negative", neg);
  }
}

void find_prompts(const SplitGraphs& sg, InjectMap& m, SplitResult& r) {
  const Json& g = sg.sample;
  std::vector<Slot> pos, neg;
  auto chain = ancestors(g, {sg.sampler});
  for (const auto& id : topological_order(g)) {
    if (!is_sampler(class_of(g, id), g[id])) continue;
    if (chain.count(id))
      conditioning_of(g, id, pos, neg);
    else
      r.notes.push_back(fmt::format(
          "{} samples another latent (audio): its prompt and steps stay as in the workflow, only "
          "its seed is injected",
          describe(g, id)));
  }
  std::set<Target> ptargets;
  for (const auto& s : pos)
    for (const auto& t : trace_text(g, sg.object_info, s)) {
      m.add("prompt", t.node, t.input);
      ptargets.insert(t);
    }
  for (const auto& s : neg)
    for (const auto& t : trace_text(g, sg.object_info, s)) {
      if (ptargets.count(t)) {
        r.notes.push_back(fmt::format(
            "{} feeds both the positive and the negative conditioning; only the prompt is injected",
            describe(g, t.node)));
        continue;
      }
      m.add("negative_prompt", t.node, t.input);
    }
  if (!m.has("prompt"))
    r.notes.push_back(fmt::format(
        "no prompt text found behind the positive conditioning of {} (CLIPTextEncode, "
        "TextEncodeHunyuanVideo_ImageToVideo, ...): add \"prompt\" to the inject map by hand",
        describe(g, sg.sampler)));
}

void find_seed_steps(const SplitGraphs& sg, InjectMap& m, SplitResult& r) {
  const Json& g = sg.sample;
  bool split_steps = false;
  auto chain = ancestors(g, {sg.sampler});
  for (const auto& id : topological_order(g)) {
    if (!is_sampler(class_of(g, id), g[id])) continue;
    const auto& in = inputs_of(g, id);
    for (const char* k : {"seed", "noise_seed"})
      if (is_widget_value(in, k)) m.add("seed", id, k);
    if (in.contains("noise") && is_link(in["noise"])) {
      std::string n = in["noise"][0].get<std::string>();
      if (is_widget_value(inputs_of(g, n), "noise_seed")) m.add("seed", n, "noise_seed");
    }
    if (!chain.count(id)) continue;
    if (is_widget_value(in, "steps")) m.add("steps", id, "steps");
    if (in.contains("sigmas") && is_link(in["sigmas"])) {
      std::string n = in["sigmas"][0].get<std::string>();
      if (is_widget_value(inputs_of(g, n), "steps")) m.add("steps", n, "steps");
    }
    // KSamplerAdvanced chains (Wan 2.2 14B high/low noise) split the steps between samplers.
    auto num = [&](const char* k, long long dflt) {
      return in.contains(k) && in[k].is_number_integer() ? in[k].get<long long>() : dflt;
    };
    if (num("start_at_step", 0) > 0 || num("end_at_step", 10000) < num("steps", 0))
      split_steps = true;
  }
  if (split_steps && m.has("steps")) {
    m.erase("steps");
    r.notes.push_back(
        "steps not injected: the samplers split the steps between them (start_at_step / "
        "end_at_step); change them together in the template");
  }
  if (!m.has("seed")) r.notes.push_back("no seed widget found on the samplers or their noise node");
}

void find_geometry(const SplitGraphs& sg, const HandoffNodes& h, InjectMap& m, SplitResult& r) {
  if (sg.latent_source.empty()) return;
  const Json& g = sg.sample;
  const auto& save = inputs_of(g, sg.save_node);
  for (const auto& [param, input] : std::vector<std::pair<std::string, std::string>>{
           {"width", h.width}, {"height", h.height}, {"frames", h.frames}, {"fps", h.fps}})
    if (is_widget_value(save, input)) m.add(param, sg.save_node, input);
  const auto* ls = latent_source_class(class_of(g, sg.latent_source));
  const auto& in = inputs_of(g, sg.latent_source);
  for (const auto& [param, input] : std::vector<std::pair<std::string, std::string>>{
           {"width", ls->width}, {"height", ls->height}, {"frames", ls->frames}}) {
    if (input.empty()) continue;
    if (is_widget_value(in, input))
      m.add(param, sg.latent_source, input);
    else
      r.notes.push_back(fmt::format("{} input \"{}\" is linked, not a value: {} not injected",
                                    describe(g, sg.latent_source), input, param));
  }
}

void find_fps(const Json& g, InjectMap& m) {
  for (const auto& id : topological_order(g)) {
    std::string k = fps_input(class_of(g, id));
    if (!k.empty() && is_widget_value(inputs_of(g, id), k)) m.add("fps", id, k);
  }
}

// Whether a node's output feeds an input named as a last frame (MiniMaxH3ImageToVideo's
// last_frame; end_image / end_frame of the first/last-frame nodes of other models).
bool feeds_last_frame(const Json& g, const std::string& id) {
  for (auto it = g.begin(); it != g.end(); ++it) {
    if (!it.value().contains("inputs")) continue;
    for (auto in = it.value()["inputs"].begin(); in != it.value()["inputs"].end(); ++in)
      if (is_link(in.value()) && link_of(in.value()).node == id &&
          (in.key() == "last_frame" || in.key() == "end_image" || in.key() == "end_frame"))
        return true;
  }
  return false;
}

// The voice sample (LoadAudio of the sample side, e.g. ref2va's ref_audios) -> reference_audio.
void find_reference_audio(const SplitGraphs& sg, InjectMap& m, SplitResult& r) {
  const Json& g = sg.sample;
  std::string pick;
  for (const auto& id : topological_order(g)) {
    if (class_of(g, id) != "LoadAudio" || !is_widget_value(inputs_of(g, id), "audio")) continue;
    if (pick.empty()) {
      pick = id;
      m.add("reference_audio", id, "audio");
    } else {
      r.notes.push_back(
          fmt::format("{} loads a second audio file; only {} receives the job's "
                      "reference audio",
                      describe(g, id), describe(g, pick)));
    }
  }
}

// LoadImage nodes of the sample side; one feeding a last-frame input takes the job's
// last_frame_image; of the others, with several, the one behind the latent source.
void find_reference_image(const SplitGraphs& sg, InjectMap& m, SplitResult& r) {
  const Json& g = sg.sample;
  std::vector<std::string> loads;
  for (const auto& id : topological_order(g)) {
    if (class_of(g, id) != "LoadImage" || !is_widget_value(inputs_of(g, id), "image")) continue;
    if (!m.has("last_frame_image") && feeds_last_frame(g, id))
      m.add("last_frame_image", id, "image");
    else
      loads.push_back(id);
  }
  if (loads.empty()) return;
  std::string pick = loads.front();
  if (loads.size() > 1 && !sg.latent_source.empty()) {
    auto up = ancestors(g, {sg.latent_source});
    for (const auto& l : loads)
      if (up.count(l)) {
        pick = l;
        break;
      }
  }
  m.add("reference_image", pick, "image");
  for (const auto& l : loads)
    if (l != pick)
      r.notes.push_back(
          fmt::format("{} loads a second image; only {} receives the job's "
                      "reference image",
                      describe(g, l), describe(g, pick)));
}

}  // namespace

void find_inject(const SplitGraphs& sg, const HandoffNodes& h, SplitResult& r) {
  InjectMap s, d;
  find_prompts(sg, s, r);
  find_seed_steps(sg, s, r);
  find_geometry(sg, h, s, r);
  find_fps(sg.sample, s);
  find_reference_image(sg, s, r);
  find_reference_audio(sg, s, r);
  s.add("filename_prefix", sg.save_node, h.save_prefix_input);
  for (auto it = sg.sample.begin(); it != sg.sample.end(); ++it)
    if (it.value()["class_type"] == "EmptyLatentAudio")
      r.notes.push_back(fmt::format("{} seconds is not injected: keep it at the job's frames / fps",
                                    describe(sg.sample, it.key())));

  d.add("input", sg.load_node, h.load_path_input);
  find_fps(sg.decode, d);
  for (const auto& id : topological_order(sg.decode)) {
    if (id == sg.load_node) continue;
    const auto& in = inputs_of(sg.decode, id);
    bool output = sg.object_info && sg.object_info->find(class_of(sg.decode, id))
                      ? sg.object_info->find(class_of(sg.decode, id))->output_node
                      : is_known_output_node(class_of(sg.decode, id));
    if (output && is_widget_value(in, "filename_prefix"))
      d.add("filename_prefix", id, "filename_prefix");
  }
  if (!d.has("fps"))
    r.notes.push_back("no fps widget on the decode side (CreateVideo, SaveAnimatedWEBP, ...)");
  r.inject = {{"sample", s.to_json()}, {"decode", d.to_json()}};
}

}  // namespace h3pipe::comfyui
