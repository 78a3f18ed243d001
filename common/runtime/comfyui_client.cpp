#include "common/runtime/comfyui_client.h"

#include <fmt/ranges.h>

#include <cctype>
#include <chrono>
#include <thread>

#include "common/core/json_parse.h"
#include "common/core/json_reader.h"
#include "common/core/sha256.h"

namespace h3pipe::runtime::comfyui {
namespace {

// ComfyUI's texts (exception messages, validation details) often end in a newline; a reason
// that ends a log line must not.
std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// A body as JSON, depth and size bounded (issue #35 D2: a 400 whose message nested 300,000 levels
// overflowed the stack of whoever printed it); nullopt and *why when refused.
std::optional<nlohmann::json> body_json(const std::string& body, std::string* why) {
  return json_reader::parse_limited(body, {}, why);
}

// What an unusable answer says: the parser's reason, and how the body begins.
std::string unusable(const std::string& why, const std::string& body) {
  return fmt::format("not usable JSON ({}); it begins {}", why,
                     json_reader::printable(body.substr(0, 120)));
}

template <typename J>
std::string str(const J& j, const char* key) {
  if (j.is_object() && j.contains(key)) {
    const auto& v = j[key];
    if (v.is_string()) return trimmed(v.template get<std::string>());
    if (!v.is_null()) return v.dump();
  }
  return {};
}

}  // namespace

// The 400 body of POST /prompt: {"error": {"type", "message", "details"}, "node_errors": {id: {
// "errors": [{"message", "details"}], "class_type"}}}.
std::string describe_rejection(const nlohmann::json& body) {
  std::string s;
  if (body.contains("error")) {
    const auto& e = body["error"];
    if (e.is_string())
      s = trimmed(e.get<std::string>());
    else {
      s = str(e, "message");
      // The details of prompt_outputs_failed_validation repeat the node errors below.
      if (auto d = str(e, "details");
          !d.empty() && !(body.contains("node_errors") && !body["node_errors"].empty()))
        s += ": " + d;
    }
  }
  if (body.contains("node_errors") && body["node_errors"].is_object()) {
    for (auto it = body["node_errors"].begin(); it != body["node_errors"].end(); ++it) {
      s += fmt::format("; node {} ({})", it.key(), str(it.value(), "class_type"));
      if (it.value().contains("errors") && it.value()["errors"].is_array()) {
        const char* sep = ": ";
        for (const auto& er : it.value()["errors"]) {
          s += sep + str(er, "message");
          if (auto d = str(er, "details"); !d.empty()) s += " (" + d + ")";
          sep = ", ";
        }
      }
    }
  }
  return s.empty() ? body.dump().substr(0, 500) : s;
}

namespace {

// "RuntimeError" of "torch.OutOfMemoryError" or "/srv/comfy/custom_nodes/pack.nodes.NodeError".
std::string class_name(const std::string& type) {
  const auto dot = type.rfind('.');
  const auto slash = type.rfind('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash))
    return type.substr(dot + 1);
  return slash == std::string::npos ? type : type.substr(slash + 1);
}

// An h3pipe code: lower-case words joined by dots, at least two ("latent.nonfinite").
bool is_code(std::string_view s) {
  if (s.empty() || s.front() == '.' || s.back() == '.' || s.find('.') == std::string_view::npos)
    return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.' ? s[i - 1] == '.'
                 : !(std::islower(static_cast<unsigned char>(c)) ||
                     std::isdigit(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  }
  return true;
}

}  // namespace

ExecutionFailure execution_failure(const nlohmann::json& status) {
  ExecutionFailure f;
  if (status.is_object() && status.contains("messages") && status["messages"].is_array()) {
    for (const auto& m : status["messages"]) {
      if (!m.is_array() || m.size() < 2 || !m[0].is_string()) continue;
      const auto& d = m[1];
      const std::string where = fmt::format("node {} ({})", str(d, "node_id"), str(d, "node_type"));
      if (m[0] == "execution_error") {
        // The node pack raises "<Node>: <code>: <reason>" (some stand-ins "<code>: <reason>").
        std::string text = str(d, "exception_message");
        std::string_view rest = text;
        if (auto colon = rest.find(": "); colon != std::string_view::npos &&
                                          !is_code(rest.substr(0, colon)) &&
                                          rest.substr(0, colon).find(' ') == std::string_view::npos)
          rest.remove_prefix(colon + 2);
        // Only h3pipe's NodeError, or a code of this build's catalogue, is read so: another
        // exception's text that merely looks like "word.word: ..." keeps its class.
        const std::string cls = class_name(str(d, "exception_type"));
        if (auto colon = rest.find(": ");
            colon != std::string_view::npos && is_code(rest.substr(0, colon)) &&
            (cls == "NodeError" || errc::find(rest.substr(0, colon)))) {
          f.code = std::string(rest.substr(0, colon));
          f.without_code = fmt::format("{}: {}", where, rest.substr(colon + 2));
          f.description = fmt::format("{}: {}: {}", where, f.code, rest.substr(colon + 2));
          return f;
        }
        f.description = fmt::format("{} raised {}: {}", where, cls, text);
        return f;
      }
      if (m[0] == "execution_interrupted") {
        f.interrupted = true;
        f.description = "interrupted at " + where;
        return f;
      }
    }
  }
  f.description =
      fmt::format("status \"{}\" without an execution_error message", str(status, "status_str"));
  return f;
}

std::string describe_execution_error(const nlohmann::json& status) {
  return execution_failure(status).description;
}

std::string prompt_id_for(const std::string& run, const std::string& job, const std::string& stage,
                          long long attempt) {
  std::string h =
      sha256_hex(fmt::format("h3pipe-prompt\n{}\n{}\n{}\n{}", run, job, stage, attempt));
  // UUID layout (version nibble 5, RFC 4122 variant) so tools that expect one accept it.
  h[12] = '5';
  h[16] = "89ab"[std::stoi(h.substr(16, 1), nullptr, 16) & 3];
  return fmt::format("{}-{}-{}-{}-{}", h.substr(0, 8), h.substr(8, 4), h.substr(12, 4),
                     h.substr(16, 4), h.substr(20, 12));
}

Client::Client(std::string base_url, http::Options options)
    : base_(std::move(base_url)), http_(options) {
  while (!base_.empty() && base_.back() == '/') base_.pop_back();
}

Error Client::wrap(const Error& e) const {
  if (e.code == errc::http::kConnect)
    return make_error(errc::runtime::kComfyuiUnreachable, "ComfyUI server at {} is unreachable: {}",
                      base_, e.message);
  if (e.code == errc::http::kTimeout)
    return make_error(errc::runtime::kComfyuiTimeout,
                      "ComfyUI server at {} did not answer in time: {}", base_, e.message);
  return make_error(errc::runtime::kComfyuiHttp, "ComfyUI server at {}: {}", base_, e.message);
}

Result<nlohmann::json> Client::get_json(const std::string& path) {
  auto r = http_.get(base_ + path);
  if (!r.ok()) return wrap(r.error());
  if (r->status != 200)
    return make_error(errc::runtime::kComfyuiHttp,
                      "ComfyUI server at {}: GET {} answered HTTP {}: {}", base_, path, r->status,
                      r->body.substr(0, 300));
  std::string why;
  auto j = body_json(r->body, &why);
  if (!j)
    return make_error(errc::runtime::kComfyuiHttp, "ComfyUI server at {}: GET {} answered {}",
                      base_, path, unusable(why, r->body));
  return std::move(*j);
}

Result<std::string> Client::queue_prompt(const nlohmann::json& graph, const Submission& sub) {
  nlohmann::json body = {{"prompt", graph}, {"client_id", sub.client_id}};
  if (!sub.prompt_id.empty()) body["prompt_id"] = sub.prompt_id;
  if (!sub.targets.empty()) body["partial_execution_targets"] = sub.targets;
  auto r = http_.post_json(base_ + "/prompt", body.dump());
  if (!r.ok()) return wrap(r.error());
  if (r->status == 413)
    return make_error(errc::runtime::kPermanentComfyuiTooLarge,
                      "ComfyUI server at {} refused the workflow ({} bytes) with HTTP 413: above "
                      "its --max-upload-size",
                      base_, body.dump().size());
  std::string why;
  auto parsed = body_json(r->body, &why);
  if (r->status == 400 && parsed)
    return make_error(errc::runtime::kPermanentComfyuiRejected,
                      "ComfyUI server at {} rejected the workflow: {}", base_,
                      describe_rejection(*parsed));
  if (!parsed)
    return make_error(errc::runtime::kComfyuiHttp,
                      "ComfyUI server at {}: POST /prompt answered HTTP {}: {}", base_, r->status,
                      unusable(why, r->body));
  const nlohmann::json& j = *parsed;
  if (r->status != 200 || !j.contains("prompt_id") || !j["prompt_id"].is_string())
    return make_error(errc::runtime::kComfyuiHttp,
                      "ComfyUI server at {}: POST /prompt answered HTTP {}: {}", base_, r->status,
                      trimmed(r->body.substr(0, 300)));
  std::string id = j["prompt_id"].get<std::string>();
  // A 200 with node_errors: some output nodes failed validation and ComfyUI queued the prompt
  // with only the others ("Output will be ignored"), which would hand back the wrong file.
  if (j.contains("node_errors") && j["node_errors"].is_object() && !j["node_errors"].empty()) {
    discard(id);
    return make_error(errc::runtime::kPermanentComfyuiRejected,
                      "ComfyUI server at {} rejected part of the workflow (it would have run the "
                      "rest without it; the prompt was removed){}",
                      base_, describe_rejection(j));
  }
  return id;
}

Result<PromptState> Client::history(const std::string& prompt_id) {
  std::string path = "/history/" + http::Client::escape(prompt_id);
  auto r = http_.get(base_ + path);
  if (!r.ok()) return wrap(r.error());
  // Ordered: the outputs keep the order the server lists them in.
  std::string why;
  auto parsed = json_reader::parse_limited_ordered(r->body, {}, &why);
  if (r->status != 200 || !parsed)
    return make_error(errc::runtime::kComfyuiHttp,
                      "ComfyUI server at {}: GET {} answered HTTP {}: {}", base_, path, r->status,
                      parsed ? trimmed(r->body.substr(0, 300)) : unusable(why, r->body));
  const nlohmann::ordered_json& j = *parsed;
  PromptState st;
  if (!j.is_object() || !j.contains(prompt_id)) return st;
  const auto& entry = j[prompt_id];
  if (entry.contains("status") && entry["status"].is_object()) {
    const auto& status = entry["status"];
    std::string s = str(status, "status_str");
    if (s == "error") {
      st.kind = PromptState::Kind::kError;
      auto failure = execution_failure(nlohmann::json(status));
      st.error = std::move(failure.description);
      st.error_code = std::move(failure.code);
      st.error_detail = std::move(failure.without_code);
      st.interrupted = failure.interrupted;
      return st;
    }
    bool completed = status.contains("completed") && status["completed"].is_boolean() &&
                     status["completed"].get<bool>();
    if (s != "success" && !completed) return st;  // not final yet
  }
  // Servers before status reporting add the entry only when the prompt is done.
  st.kind = PromptState::Kind::kSuccess;
  if (entry.contains("outputs") && entry["outputs"].is_object()) {
    for (auto node = entry["outputs"].begin(); node != entry["outputs"].end(); ++node) {
      if (!node.value().is_object()) continue;
      for (auto kind = node.value().begin(); kind != node.value().end(); ++kind) {
        if (!kind.value().is_array()) continue;
        for (const auto& item : kind.value()) {
          if (!item.is_object() || !item.contains("filename") || !item["filename"].is_string())
            continue;
          FileRef f{item["filename"].get<std::string>(), str(item, "subfolder"), str(item, "type"),
                    node.key()};
          if (f.type.empty()) f.type = "output";
          st.outputs.push_back(std::move(f));
        }
      }
    }
  }
  return st;
}

Result<PromptLocation> Client::locate(const std::string& prompt_id) {
  PromptLocation loc;
  auto st = history(prompt_id);
  if (!st.ok()) return st.error();
  if (st->kind != PromptState::Kind::kPending) {
    loc.kind = PromptLocation::Kind::kDone;
    loc.state = std::move(*st);
    return loc;
  }
  auto j = get_json("/queue");
  if (!j.ok()) return j.error();
  for (auto [list, kind] : {std::pair{"queue_running", PromptLocation::Kind::kRunning},
                            std::pair{"queue_pending", PromptLocation::Kind::kQueued}}) {
    if (!j->contains(list) || !(*j)[list].is_array()) continue;
    for (const auto& item : (*j)[list])
      if (item.is_array() && item.size() > 1 && item[1].is_string() &&
          item[1].get<std::string>() == prompt_id) {
        loc.kind = kind;
        return loc;
      }
  }
  st = history(prompt_id);
  if (!st.ok()) return st.error();
  if (st->kind != PromptState::Kind::kPending) {
    loc.kind = PromptLocation::Kind::kDone;
    loc.state = std::move(*st);
  }
  return loc;
}

Result<FileRef> Client::upload(int fd, std::uint64_t size, const std::string& name,
                               const std::string& subfolder) {
  std::vector<http::FormPart> parts = {
      {"image", "", {}, name, "", fd, size},
      {"type", "input", {}, "", ""},
      {"subfolder", subfolder, {}, "", ""},
      {"overwrite", "true", {}, "", ""},
  };
  auto r = http_.post_form(base_ + "/upload/image", parts);
  if (!r.ok()) return wrap(r.error());
  if (r->status == 413)
    return make_error(errc::runtime::kPermanentComfyuiTooLarge,
                      "ComfyUI server at {} refused the upload of {} ({} bytes) with HTTP 413: "
                      "above its --max-upload-size (100 MB unless set)",
                      base_, name, size);
  std::string why;
  auto parsed = body_json(r->body, &why);
  if (r->status != 200 || !parsed || !parsed->contains("name") || !(*parsed)["name"].is_string())
    return make_error(errc::runtime::kComfyuiHttp,
                      "ComfyUI server at {}: uploading {} answered HTTP {}: {}", base_, name,
                      r->status, parsed ? trimmed(r->body.substr(0, 300)) : unusable(why, r->body));
  const nlohmann::json& j = *parsed;
  return FileRef{j["name"].get<std::string>(), str(j, "subfolder"),
                 str(j, "type").empty() ? "input" : str(j, "type"), ""};
}

Result<std::uint64_t> Client::view(const FileRef& f, const std::filesystem::path& to,
                                   std::uint64_t max_bytes, long timeout_ms) {
  std::string url = fmt::format("{}/view?filename={}&subfolder={}&type={}", base_,
                                http::Client::escape(f.filename), http::Client::escape(f.subfolder),
                                http::Client::escape(f.type));
  auto r = http_.download(url, to, max_bytes, timeout_ms);
  if (!r.ok()) {
    if (r.error().code == errc::http::kStatus || r.error().code == errc::http::kTooLarge ||
        errc::domain_of(r.error().code) == "io")
      return make_error(errc::runtime::kComfyuiFetch,
                        "ComfyUI server at {}: fetching output {}/{}: {}", base_, f.subfolder,
                        f.filename, r.error().message);
    return wrap(r.error());
  }
  return r;
}

void Client::cancel(const std::string& prompt_id) {
  nlohmann::json del = {{"delete", {prompt_id}}};
  (void)http_.post_json(base_ + "/queue", del.dump());
  auto where = locate(prompt_id);
  if (where.ok() && where->kind == PromptLocation::Kind::kRunning) {
    // Newer servers interrupt only the named prompt; older ones interrupt whatever runs, which
    // is this prompt, since it is still in the queue.
    nlohmann::json body = {{"prompt_id", prompt_id}};
    (void)http_.post_json(base_ + "/interrupt", body.dump());
  }
}

void Client::discard(const std::string& prompt_id) {
  nlohmann::json del = {{"delete", {prompt_id}}};
  bool interrupted = false;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    (void)http_.post_json(base_ + "/queue", del.dump());
    auto where = locate(prompt_id);
    if (!where.ok() || where->kind == PromptLocation::Kind::kUnknown) return;
    if (where->kind == PromptLocation::Kind::kDone) return forget(prompt_id);
    if (where->kind == PromptLocation::Kind::kRunning && !interrupted) {
      nlohmann::json body = {{"prompt_id", prompt_id}};
      (void)http_.post_json(base_ + "/interrupt", body.dump());
      interrupted = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void Client::forget(const std::string& prompt_id) {
  nlohmann::json del = {{"delete", {prompt_id}}};
  (void)http_.post_json(base_ + "/history", del.dump());
}

}  // namespace h3pipe::runtime::comfyui
