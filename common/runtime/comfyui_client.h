#pragma once
// The slice of ComfyUI's HTTP API (server.py) that h3pipe drives:
//   POST /prompt {"prompt": graph, "client_id": id}  -> {"prompt_id", "number", "node_errors"}
//                                                        400 {"error": {...}, "node_errors": {...}}
//   GET  /history/{prompt_id}  -> {} until the prompt finishes, then
//                                 {id: {"prompt", "outputs": {node: {kind: [{filename, subfolder,
//                                 type}]}}, "status": {"status_str", "completed", "messages"}}}
//   GET  /queue                -> {"queue_running": [[number, id, ...]], "queue_pending": [...]}
//   GET  /view?filename=&subfolder=&type=  -> the file
//   POST /upload/image  multipart image=<file>, type, subfolder, overwrite -> {name, subfolder,
//   type} POST /queue {"delete": [id]}, POST /interrupt {"prompt_id": id}, POST /history {"delete":
//   [id]}
//
// Errors name the server URL: runtime.comfyui.unreachable (connection refused, unresolvable),
// runtime.comfyui.timeout, runtime.comfyui.http (unexpected status or body),
// runtime.permanent.comfyui_rejected (the server refused the workflow: retrying cannot help).
// Threading: one Client per thread (it owns an HTTP connection).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/core/result.h"
#include "common/runtime/http_client.h"

namespace h3pipe::runtime::comfyui {

// A file ComfyUI knows by (filename, subfolder, type), as /view and /upload/image name it.
struct FileRef {
  std::string filename, subfolder, type = "output";
  std::string node_id;  // the output node that listed it (outputs only)
};

struct PromptState {
  enum class Kind { kPending, kSuccess, kError };
  Kind kind = Kind::kPending;    // kPending: not (yet) in the history
  std::vector<FileRef> outputs;  // kSuccess: every listed file, in node order
  std::string error;             // kError: which node failed and why
};

class Client final {
 public:
  Client(std::string base_url, http::Options options);

  const std::string& url() const { return base_; }

  Result<std::string> queue_prompt(const nlohmann::json& graph, const std::string& client_id);
  Result<PromptState> history(const std::string& prompt_id);
  // True while the prompt is running or pending in the server's queue.
  Result<bool> in_queue(const std::string& prompt_id);
  Result<FileRef> upload(const std::filesystem::path& file, const std::string& name,
                         const std::string& subfolder);
  Result<std::uint64_t> view(const FileRef& f, const std::filesystem::path& to,
                             std::uint64_t max_bytes, long timeout_ms);
  // Best effort: removes a pending prompt, interrupts it when it is running.
  void cancel(const std::string& prompt_id);
  // Best effort: drops the prompt's history entry once its outputs are fetched.
  void forget(const std::string& prompt_id);

 private:
  Error wrap(const Error& e) const;
  Result<nlohmann::json> get_json(const std::string& path);

  std::string base_;
  http::Client http_;
};

// "node 12 (VAEDecode) raised torch.OutOfMemoryError: ..." from a history entry's status
// messages; exposed for tests.
std::string describe_execution_error(const nlohmann::json& status);

}  // namespace h3pipe::runtime::comfyui
