// Subcommands whose logic lives in other modules: one declarative list.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/cli.h"
#include "common/latent/latent.h"

namespace h3pipe::cli {

void register_extra_commands(CLI::App& app, Global& g, int& rc) {
  auto* latent = app.add_subcommand("latent", "latent file tools");
  auto* inspect = latent->add_subcommand("inspect", "validate a .h3latent and print its tensors, metadata and SHA-256");
  static std::string file;
  static bool json = false;
  inspect->add_option("file", file)->required();
  inspect->add_flag("--json", json);
  inspect->callback([&rc] { rc = latent::inspect_main(file, json, std::cout); });
  (void)g;
}

}  // namespace h3pipe::cli
