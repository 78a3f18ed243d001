#pragma once
// Step progress from a ComfyUI server's websocket (#37 item 4): `/ws?clientId=<client_id>` carries
// the prompts' push messages to the client that queued them; `{"type": "progress", "data":
// {"value", "max", "prompt_id", "node"}}` is a sampler's (or any node's) step.  The comfyui runtime
// opens the stream before it queues a prompt (so no early step is missed) and, while it waits on
// /history, spends its waits here instead of sleeping.  Best effort: a server that refuses the
// upgrade, an https:// URL or a broken stream only means no step events (status() says why);
// /history stays what decides the prompt's outcome.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/runtime/ws_client.h"

namespace h3pipe::runtime::comfyui {

// {value, max} of a `progress` message for `prompt_id`; nullopt for any other message.
std::optional<std::pair<long long, long long>> progress_of(std::string_view message,
                                                           std::string_view prompt_id);

class ProgressFollower final {
 public:
  // Connects (within connect_timeout_ms) unless connected; after a failure, tries again only
  // 30 s later.
  void open(const std::string& base_url, const std::string& client_id, int connect_timeout_ms);
  // Waits until `until` but at most 50 ms (the caller checks for a cancel between), telling
  // `progress` every step of `prompt_id` that arrives meanwhile; without a stream, just sleeps.
  void pump(std::chrono::steady_clock::time_point until, const std::string& prompt_id,
            const std::function<void(long long, long long)>& progress);
  // "websocket" while following, else "none: <why>" ("" before open()).
  const std::string& status() const { return status_; }

 private:
  std::unique_ptr<ws::Client> ws_;
  std::optional<std::chrono::steady_clock::time_point> retry_at_;
  std::string status_;
};

}  // namespace h3pipe::runtime::comfyui
