#pragma once
// Helpers shared by the transfer tests: temp dirs, random latents, condition waits.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/artifacts/artifacts.h"
#include "common/proto/h3pipe.pb.h"
#include "tests/support/temp_dir.h"

namespace h3pipe::transfer::testing {

namespace fs = std::filesystem;

using TempDir = test_support::TempDir;

inline std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t v = rng();
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) s[i + k] = static_cast<char>(v >> (8 * k));
  }
  return s;
}

// Writes ROOT/RUN/JOB/latent.h3latent (+ sidecar) and returns the decode task pointing at it.
inline pb::StageTask make_latent_task(const fs::path& root, const std::string& run,
                                      const std::string& job, std::size_t size,
                                      const std::string& target, std::string* sha = nullptr) {
  const std::string rel = run + "/" + job + "/latent.h3latent";
  auto h =
      artifacts::write_atomic(root / rel, random_bytes(size, std::hash<std::string>{}(run + job)));
  pb::StageTask t;
  t.set_run_id(run);
  t.set_job_id(job);
  t.set_stage(pb::STAGE_DECODE);
  t.set_input_path(rel);
  t.set_input_sha256(h.ok() ? *h : "");
  t.set_target_host(target);
  if (sha) *sha = h.ok() ? *h : "";
  return t;
}

inline bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds deadline) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

inline std::string slurp(const fs::path& p) {
  FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return {};
  std::string s;
  char buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

}  // namespace h3pipe::transfer::testing
