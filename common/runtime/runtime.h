#pragma once
// What a stage actually computes (docs/design.md "Runtimes").  One interface, StageRuntime; the
// stage worker (common/worker) owns queueing, leases, idempotence and receipts, and calls a
// runtime only to turn input artifact(s) into the output artifact.  A runtime knows nothing of
// Redis or ZeroMQ.
//
// A runtime is made for one stage (make_runtime) and told nothing else: what its context's input
// and output hold is that stage's row of the stage table (config/stages.h: reads, writes):
//  - encode: prompt (+ reference image) -> conditioning tensor file at ctx.output;
//  - sample: conditioning at ctx.input -> dual-stream .h3latent at ctx.output;
//  - decode: .h3latent at ctx.input (+ ctx.conditioning, when present) -> MP4 (H.264 + AAC
//    stereo 48 kHz) at ctx.output.
//
// Contract for run():
//  - ctx.output is the final path; the runtime writes it atomically with its .sha256 sidecar
//    (common/artifacts, common/latent) and returns the output's SHA-256 and size;
//  - errors are returned, never thrown; a code of retry class kPermanent (the runtime.permanent.*
//    entries of common/core/error_codes.inc) means retrying cannot help (bad weights, invalid
//    input, a workflow the server rejects): the worker dead-letters
//    the task at once with that reason instead of retrying it;
//  - ctx.cancelled() may be polled in long loops; returning an error with code
//    "runtime.cancelled" when it is true;
//  - run() may be called from one thread at a time per instance (a worker owns its runtime).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/latent/latent.h"
#include "common/proto/h3pipe.pb.h"

namespace h3pipe::runtime {

struct StageContext {
  std::string run_id;
  const pb::JobSpec* spec = nullptr;
  std::string job_class;  // resolved class name (profiles)
  // The job's latent profile (spec::latent_profile, resolved by the worker): what the sample
  // stage must produce and the decode stage reads (docs/latent.md).
  latent::LatentProfile latent_profile = latent::builtin_profile();
  std::filesystem::path input;         // previous stage's artifact; empty for encode
  std::filesystem::path conditioning;  // decode may want it; empty if not available
  std::filesystem::path output;        // final path to write
  // This execution's own temporary for `output` (prepare_output names it, stage_output.h), where
  // a runtime's writer streams the output; set by the runtime itself (an exec command's
  // {output}).  Empty before.
  std::filesystem::path output_part;
  // The configured root ctx.output lies under (artifact_root for encode/sample, output_root for
  // decode); every file the runtime creates for the output resolves below it without following a
  // symlink (common/artifacts/safe_path.h).  Empty: derived from ctx.output (output_root() in
  // stage_output.h).
  std::filesystem::path root;
  std::string host, pool;
  // This delivery's attempt number for the stage (1 = first); a runtime that hands work to a
  // server names it by (run, job, stage, attempt) so a later attempt can find an earlier one's.
  long long attempt = 1;
  std::function<bool()> cancelled = [] { return false; };
  // Step progress (#37): a runtime that knows its steps calls progress(k, n) after step k of n
  // (the sampler's denoising steps; ComfyUI's `progress` messages; exec's `progress N/M` lines).
  // Cheap and never blocking (the worker turns it into a pipelined event write); same thread as
  // run().
  std::function<void(long long step, long long steps)> progress = [](long long, long long) {};
  // A look at the sample being made (#38 item 6): a small JPEG, base64, after step k of n.
  // Unset: nobody looks, and a runtime skips making one.  Same rules as progress.
  std::function<void(long long step, long long steps, const std::string& jpeg_base64)> preview{};
};

struct StageOutput {
  std::string sha256;
  std::uint64_t bytes = 0;
  std::string device = "cpu";  // what computed it ("cpu", "cuda:0", "comfyui@host:port")
  nlohmann::json settings = nlohmann::json::object();  // runtime settings worth a receipt
  bool reused = false;  // the commit found the output already committed by another execution
  double mux_s = 0;     // decode: seconds of it spent writing the MP4 container (receipt mux_s)
};

class StageRuntime {
 public:
  virtual ~StageRuntime() = default;
  virtual Result<StageOutput> run(const StageContext& ctx) = 0;
};

// A StageRuntime over a runner that does every stage the same way (`Result<StageOutput>
// run(const StageContext&)`, told its stage when built: the exec and ComfyUI runtimes).
template <class Runner>
class RunnerRuntime final : public StageRuntime {
 public:
  template <class... Args>
  explicit RunnerRuntime(Args&&... args) : r_(std::forward<Args>(args)...) {}
  Result<StageOutput> run(const StageContext& ctx) override { return r_.run(ctx); }

 private:
  Runner r_;
};

// Everything a runtime factory may need: the runtime's own settings, the pool it runs for,
// and the cluster (time_scale, limits).
struct FactoryArgs {
  const config::Cluster* cluster = nullptr;
  const config::Pool* pool = nullptr;
  const nlohmann::json* settings = nullptr;
  std::uint64_t seed = 0;  // for sim draws: differs per process
};

// Factories by runtime name (the RuntimeKind table, kinds.h).  Unknown names and invalid
// settings are start-up errors naming the settings path.
Result<std::unique_ptr<StageRuntime>> make_runtime(config::StageKind stage, std::string_view name,
                                                   const FactoryArgs& a);

}  // namespace h3pipe::runtime
