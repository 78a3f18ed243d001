#pragma once
// Shared helpers of the model tests: small configs and temp dirs.
#include <filesystem>
#include <random>
#include <string>

#include "common/model/model.h"

namespace h3pipe::model::testing {

// A model small enough that every test runs in well under a second on one core.
inline ModelConfig tiny_config(int threads = 2) {
  ModelConfig c;
  c.width = 64;
  c.depth = 2;
  c.heads = 2;
  c.mlp_ratio = 2;
  c.text_layers = 1;
  c.cond_tokens = 16;
  c.vae_channels = {16, 16, 8, 8, 8};
  c.audio_channels = {8, 8, 8};
  c.threads = threads;
  c.seed = 7;
  return c;
}

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("h3pipe_model_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace h3pipe::model::testing
