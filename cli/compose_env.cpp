// config-adapt's compose side (issue #34 P7): beside the config it writes, deploy/<host>.env for
// every host, the env file `start --all --launcher compose` passes to compose on that host.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <fstream>

#include "cli/cli.h"
#include "common/artifacts/artifacts.h"
#include "common/remote/remote.h"

namespace h3pipe::cli {
namespace fs = std::filesystem;

int write_compose_envs(const std::string& output, bool force, std::ostream& out,
                       std::ostream& err) {
  auto c = config::load_file(output);
  if (!c.ok()) {
    fmt::print(err, "config-adapt: {}: {}\n", output, c.error().message);
    return 1;
  }
  const fs::path dir = fs::absolute(output).parent_path() / "deploy";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    fmt::print(err, "config-adapt: cannot create {}: {}\n", dir.string(), ec.message());
    return 1;
  }
  // compose's project folder is the config's folder: the config as compose.yaml mounts it.
  const std::string config_file = "./" + fs::path(output).filename().string();
  for (const auto& h : c->hosts) {
    const fs::path f = dir / (h.name + ".env");
    if (fs::exists(f) && !force) {
      fmt::print(out, "  kept {} (exists; --force rewrites it)\n", f.string());
      continue;
    }
    auto env = remote::compose_env(*c, h, config_file);
    if (!env.ok()) {
      // A host compose.yaml cannot run (more pools than its slots): the native launcher still can.
      fmt::print(out, "  no {}: {}\n", f.string(), env.error().message);
      continue;
    }
    if (auto w = artifacts::write_atomic(f, *env); !w.ok()) {
      fmt::print(err, "config-adapt: {}\n", w.error().message);
      return 1;
    }
    fs::remove(artifacts::sidecar_path(f), ec);  // an env file, not an artifact
    fmt::print(out, "  wrote {} (compose: --env-file deploy/{}.env)\n", f.string(), h.name);
  }
  return 0;
}

}  // namespace h3pipe::cli
