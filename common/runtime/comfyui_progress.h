#pragma once
// Step progress and previews from a ComfyUI server's websocket (#37 item 4, #38 item 6):
// `/ws?clientId=<client_id>` carries the prompts' push messages to the client that queued them;
// `{"type": "progress", "data": {"value", "max", "prompt_id", "node"}}` is a sampler's (or any
// node's) step, and a server started with `--preview-method` (latent2rgb, taesd, auto) sends a
// binary preview frame per sampler step (preview_frame_of).  The comfyui runtime opens the stream
// before it queues a prompt (so no early step is missed) and, while it waits on /history, spends
// its waits here instead of sleeping.  Best effort: a server that refuses the upgrade, an https://
// URL or a broken stream only means no step events (status() says why); /history stays what
// decides the prompt's outcome, and a preview is never waited for.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/runtime/ws_client.h"

namespace h3pipe::runtime::comfyui {

// {value, max} of a `progress` message for `prompt_id`; nullopt for any other message.
std::optional<std::pair<long long, long long>> progress_of(std::string_view message,
                                                           std::string_view prompt_id);

// A preview frame as ComfyUI 0.3.64's server.py sends it (recorded:
// tests/runtime/recorded-comfyui-v0.3.64-ws.json): u32 big-endian event type, then
//   1 PREVIEW_IMAGE: u32 BE image type (1 JPEG, 2 PNG), the image;
//   4 PREVIEW_IMAGE_WITH_METADATA (to a client whose first message announced
//     {"type": "feature_flags", "data": {"supports_preview_metadata": true}}): u32 BE metadata
//     length, metadata JSON {node_id, prompt_id, display_node_id, parent_node_id, real_node_id,
//     image_type "image/jpeg"|"image/png"}, the image.
// nullopt for anything else (other binary events, a short or malformed frame).
struct PreviewFrame {
  std::optional<std::string> prompt_id;  // type 4's; type 1 names none
  std::string_view image;                // the JPEG or PNG, inside the message
};
std::optional<PreviewFrame> preview_frame_of(std::string_view message);

// The frames a preview may come from: larger ones are skipped by the websocket client unread.
inline constexpr std::size_t kMaxPreviewFrameBytes = 512 * 1024;
// At most one preview this often (the frame shown is the newest one).
inline constexpr std::chrono::milliseconds kPreviewInterval{500};

// What the previews of one prompt cost (the runtime puts it in its receipt settings).
struct PreviewStats {
  long long frames = 0;     // frames of this prompt received
  long long sent = 0;       // previews handed on
  long long bytes_in = 0;   // of the frames handed on, as received
  long long bytes_out = 0;  // of the previews handed on (base64)
  double cost_s = 0;        // wall time spent decoding, shrinking and re-encoding them
  double cpu_s = 0;         // ... and this thread's CPU time for it
};
// {frames, sent, bytes_in, bytes_out, cost_s, cpu_s}
nlohmann::json to_json(const PreviewStats& s);

class ProgressFollower final {
 public:
  using Preview = std::function<void(long long, long long, const std::string&)>;
  // Connects (within connect_timeout_ms) unless connected; after a failure, tries again only
  // 30 s later.  A new connection's first message asks for preview frames with metadata.
  // `previews`: keep binary frames up to kMaxPreviewFrameBytes (else all are skipped).
  void open(const std::string& base_url, const std::string& client_id, int connect_timeout_ms,
            bool previews = false);
  // Waits until `until` but at most 50 ms (the caller checks for a cancel between), telling
  // `progress` every step of `prompt_id` that arrives meanwhile and `preview` (when set) the
  // newest frame of that prompt as a small JPEG (preview.h), at most every kPreviewInterval;
  // without a stream, just sleeps.
  void pump(std::chrono::steady_clock::time_point until, const std::string& prompt_id,
            const std::function<void(long long, long long)>& progress, const Preview& preview = {});
  // Once the prompt is done: reads what the stream already holds for it (its last steps, sent
  // just before its history entry appeared), waiting at most 100 ms more only while its last
  // step is missing.
  void drain(const std::string& prompt_id,
             const std::function<void(long long, long long)>& progress,
             const Preview& preview = {});
  // "websocket" while following, else "none: <why>" ("" before open()).
  const std::string& status() const { return status_; }
  // The previews of `prompt_id` when it is the prompt pumped last, else nullptr.
  const PreviewStats* preview_stats(const std::string& prompt_id) const {
    return prompt_id == prompt_ ? &stats_ : nullptr;
  }

 private:
  void offer_preview(const Preview& preview);
  // One poll of the stream within timeout_ms; false when nothing came or the stream broke.
  bool read(int timeout_ms, const std::string& prompt_id,
            const std::function<void(long long, long long)>& progress, const Preview& preview);

  std::unique_ptr<ws::Client> ws_;
  std::optional<std::chrono::steady_clock::time_point> retry_at_;
  std::string status_;
  // The prompt pumped last and what its stream said so far.
  std::string prompt_;
  bool running_ = false;  // the last `progress` message named prompt_ (type 1 frames are its)
  long long step_ = 0, steps_ = 0, sent_step_ = -1;
  std::optional<std::string> pending_;  // the newest frame not handed on yet
  std::chrono::steady_clock::time_point sent_at_{};
  PreviewStats stats_;
};

}  // namespace h3pipe::runtime::comfyui
