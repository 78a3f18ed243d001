#include "common/comfyui/object_info.h"

namespace h3pipe::comfyui {
namespace {

bool is_value_type(const std::string& t) {
  return t == "INT" || t == "FLOAT" || t == "STRING" || t == "BOOLEAN" || t == "COMBO";
}

// One entry of input.required / input.optional: ["TYPE", {options}] or [[choices], {options}]
// or ["COMBO", {"options": [...]}] (the v3 node schema).
std::optional<InputSpec> parse_input(const std::string& name, const Json& spec, bool required) {
  InputSpec s;
  s.name = name;
  s.required = required;
  if (spec.is_string()) {  // seen for hidden inputs; accepted anywhere
    s.type = spec.get<std::string>();
    return s;
  }
  if (!spec.is_array() || spec.empty()) return std::nullopt;
  if (spec.size() > 1 && spec[1].is_object()) s.options = spec[1];
  if (spec[0].is_array()) {
    s.type = "COMBO";
    s.choices = spec[0].get<std::vector<Json>>();
  } else if (spec[0].is_string()) {
    s.type = spec[0].get<std::string>();
    if (s.type == "COMBO" && s.options.contains("options") && s.options["options"].is_array())
      s.choices = s.options["options"].get<std::vector<Json>>();
    else if (s.type == "COMBO")
      s.choices = std::vector<Json>{};
  } else {
    return std::nullopt;
  }
  return s;
}

}  // namespace

bool InputSpec::is_widget() const {
  if (!is_value_type(type)) return false;
  return !(options.contains("forceInput") && options["forceInput"] == true);
}

bool InputSpec::has_seed_control() const {
  if (type != "INT") return false;
  if (options.contains("control_after_generate")) return options["control_after_generate"] == true;
  return name == "seed" || name == "noise_seed";  // the frontend adds it to these by name
}

bool InputSpec::has_upload_widget() const {
  for (const char* k : {"image_upload", "video_upload", "audio_upload", "animated_image_upload"})
    if (options.contains(k) && options[k] == true) return true;
  return false;
}

const InputSpec* ClassInfo::input(const std::string& n) const {
  for (const auto& i : inputs)
    if (i.name == n) return &i;
  return nullptr;
}

Result<ObjectInfo> ObjectInfo::parse(const Json& j, bool allow_empty) {
  if (!j.is_object() || (j.empty() && !allow_empty))
    return make_error(errc::comfyui::kObjectInfo,
                      "not an /object_info answer: expected an object of node classes, got {}",
                      j.is_object() ? "an empty object" : j.type_name());
  ObjectInfo oi;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& c = it.value();
    ClassInfo ci;
    ci.name = it.key();
    auto bad = [&](const std::string& why) {
      return make_error(errc::comfyui::kObjectInfo, "/object_info: class \"{}\": {}", it.key(),
                        why);
    };
    if (!c.is_object()) return bad("expected an object");
    const Json empty = Json::object();
    const Json& input = c.contains("input") && c["input"].is_object() ? c["input"] : empty;
    for (const char* section : {"required", "optional"}) {
      if (!input.contains(section)) continue;
      const auto& sec = input[section];
      if (!sec.is_object()) return bad(fmt::format("input.{} is not an object", section));
      std::vector<std::string> order;
      if (c.contains("input_order") && c["input_order"].is_object() &&
          c["input_order"].contains(section) && c["input_order"][section].is_array()) {
        for (const auto& n : c["input_order"][section])
          if (n.is_string() && sec.contains(n.get<std::string>()))
            order.push_back(n.get<std::string>());
      }
      for (auto in = sec.begin(); in != sec.end(); ++in)  // any not in input_order, after it
        if (std::find(order.begin(), order.end(), in.key()) == order.end())
          order.push_back(in.key());
      for (const auto& n : order) {
        auto s = parse_input(n, sec[n], std::string(section) == "required");
        if (!s) return bad(fmt::format("input \"{}\" is not [type, options]", n));
        ci.inputs.push_back(std::move(*s));
      }
    }
    if (c.contains("output") && c["output"].is_array())
      for (const auto& o : c["output"])
        ci.output_types.push_back(o.is_string() ? o.get<std::string>() : "COMBO");
    if (c.contains("output_name") && c["output_name"].is_array())
      for (const auto& o : c["output_name"])
        ci.output_names.push_back(o.is_string() ? o.get<std::string>() : "");
    ci.output_names.resize(ci.output_types.size());
    if (c.contains("output_node") && c["output_node"].is_boolean())
      ci.output_node = c["output_node"].get<bool>();
    if (c.contains("python_module") && c["python_module"].is_string())
      ci.python_module = c["python_module"].get<std::string>();
    oi.classes_.emplace(it.key(), std::move(ci));
  }
  return oi;
}

const ClassInfo* ObjectInfo::find(const std::string& cls) const {
  auto it = classes_.find(cls);
  return it == classes_.end() ? nullptr : &it->second;
}

const std::vector<std::string>& known_output_names(const std::string& cls) {
  // From ComfyUI 0.3.64's /object_info (tests/comfyui/recorded_object_info_v0.3.64.json):
  // the classes whose outputs the splitter follows by name.
  static const std::map<std::string, std::vector<std::string>> k = {
      {"WanImageToVideo", {"positive", "negative", "latent"}},
      {"WanFirstLastFrameToVideo", {"positive", "negative", "latent"}},
      {"WanFunControlToVideo", {"positive", "negative", "latent"}},
      {"WanFunInpaintToVideo", {"positive", "negative", "latent"}},
      {"Wan22FunControlToVideo", {"positive", "negative", "latent"}},
      {"WanCameraImageToVideo", {"positive", "negative", "latent"}},
      {"WanVaceToVideo", {"positive", "negative", "latent", "trim_latent"}},
      {"HunyuanImageToVideo", {"positive", "latent"}},
      {"LTXVImgToVideo", {"positive", "negative", "latent"}},
      {"LTXVAddGuide", {"positive", "negative", "latent"}},
      {"LTXVCropGuides", {"positive", "negative", "latent"}},
      {"LTXVConditioning", {"positive", "negative"}},
      {"ConditioningStableAudio", {"positive", "negative"}},
      {"FluxGuidance", {"CONDITIONING"}},
      {"ConditioningZeroOut", {"CONDITIONING"}},
      {"CLIPTextEncode", {"CONDITIONING"}},
      {"SamplerCustom", {"output", "denoised_output"}},
      {"SamplerCustomAdvanced", {"output", "denoised_output"}},
      {"KSampler", {"LATENT"}},
      {"KSamplerAdvanced", {"LATENT"}},
      {"CheckpointLoaderSimple", {"MODEL", "CLIP", "VAE"}},
  };
  static const std::vector<std::string> none;
  auto it = k.find(cls);
  return it == k.end() ? none : it->second;
}

}  // namespace h3pipe::comfyui
