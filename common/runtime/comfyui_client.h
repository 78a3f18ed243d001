#pragma once
// The slice of ComfyUI's HTTP API (server.py) that h3pipe drives (answers as recorded against a
// real 0.3.64 in ../shared/comfyui/recorded-v0.3.64.json):
//   POST /prompt {"prompt": graph, "client_id", "prompt_id", "partial_execution_targets": [ids]}
//        -> {"prompt_id", "number", "node_errors"}; 400 {"error": {...}, "node_errors": {...}}
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
// runtime.permanent.comfyui_rejected (400 at POST /prompt: the workflow failed validation, with
// ComfyUI's node_errors quoted; also a 200 with node_errors, where ComfyUI queues the prompt
// with only the outputs that passed: the prompt is removed; retrying cannot help),
// runtime.permanent.comfyui_too_large (413: a request body above the server's --max-upload-size).
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
  std::vector<FileRef> outputs;  // kSuccess: every listed file, in the order the server lists them
  std::string error;             // kError: which node failed and why (ExecutionFailure)
  std::string error_code;        // kError: the node pack's code in it, else empty
  std::string error_detail;      // kError with error_code: `error` without the code
  bool interrupted = false;      // kError: by POST /interrupt (execution_interrupted)
};

// Where a prompt is on the server, from /history and /queue together.  kUnknown: neither queued,
// running nor in the history (never sent, deleted, or the server restarted since).
struct PromptLocation {
  enum class Kind { kQueued, kRunning, kDone, kUnknown };
  Kind kind = Kind::kUnknown;
  PromptState state;  // kDone
};

// What POST /prompt sends besides the graph.
struct Submission {
  std::string client_id;
  std::string prompt_id;             // h3pipe's own id (prompt_id_for); ComfyUI keeps it
  std::vector<std::string> targets;  // partial_execution_targets; empty: every output node
};

class Client final {
 public:
  Client(std::string base_url, http::Options options);

  const std::string& url() const { return base_; }

  Result<std::string> queue_prompt(const nlohmann::json& graph, const Submission& s);
  Result<PromptState> history(const std::string& prompt_id);
  // History, then the queue, then the history again (a prompt that ended between the first two
  // reads is found by the third), so kUnknown means the server does not know the prompt.
  Result<PromptLocation> locate(const std::string& prompt_id);
  // Uploads `size` bytes read from the open descriptor `fd` as input/<subfolder>/<name>
  // (overwrite=true).
  Result<FileRef> upload(int fd, std::uint64_t size, const std::string& name,
                         const std::string& subfolder);
  Result<std::uint64_t> view(const FileRef& f, const std::filesystem::path& to,
                             std::uint64_t max_bytes, long timeout_ms);
  // Best effort: removes a pending prompt, interrupts it when it is running.
  void cancel(const std::string& prompt_id);
  // Best effort, bounded (10 s): removes the prompt wherever it is (queue, running, history) so
  // no later attempt finds it.
  void discard(const std::string& prompt_id);
  // Best effort: drops the prompt's history entry once its outputs are fetched.
  void forget(const std::string& prompt_id);

 private:
  Error wrap(const Error& e) const;
  Result<nlohmann::json> get_json(const std::string& path);

  std::string base_;
  http::Client http_;
};

// How a prompt failed, from a history entry's status messages (execution_error's
// exception_type and exception_message, or execution_interrupted).  ComfyUI names an exception
// by its module path, which for a custom node is the node's folder on the server
// ("/srv/comfy/custom_nodes/h3pipe_nodes.nodes.NodeError"): only the class name is kept, and a
// message of h3pipe's node pack ("H3SaveLatent: latent.nonfinite: ...", NodeError) is reported
// by its code and text alone.
struct ExecutionFailure {
  // "node 4 (H3SaveLatent): latent.nonfinite: video holds ...",
  // "node 12 (VAEDecode) raised OutOfMemoryError: ...", "interrupted at node 12 (X)"; ComfyUI's
  // trailing newline removed.
  std::string description;
  std::string code;  // the code a node pack message carries ("latent.nonfinite"), else empty
  // With a code: the description without it ("node 4 (H3SaveLatent): video holds ...").
  std::string without_code;
  bool interrupted = false;
};
ExecutionFailure execution_failure(const nlohmann::json& status);
// execution_failure(status).description; exposed for tests.
std::string describe_execution_error(const nlohmann::json& status);
// "... failed validation; node 3 (LoadImage): Custom validation failed for node (image - Invalid
// image file: ref.png)" from a 400 body of POST /prompt; exposed for tests.
std::string describe_rejection(const nlohmann::json& body);

// h3pipe's prompt id for one attempt of a stage of a job: a UUID-shaped digest of (run, job,
// stage, attempt), so a restarted worker can find what an earlier attempt queued.
std::string prompt_id_for(const std::string& run, const std::string& job, const std::string& stage,
                          long long attempt);

}  // namespace h3pipe::runtime::comfyui
