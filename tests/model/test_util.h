#pragma once
// Shared helpers of the model tests: small configs and temp dirs.
#include <filesystem>
#include <random>
#include <string>

#include "common/model/model.h"
#include "tests/support/temp_dir.h"

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

using TempDir = h3pipe::test_support::TempDir;  // tests/support/temp_dir.h

}  // namespace h3pipe::model::testing
