// `h3pipe credentials init` and `h3pipe credentials export` (issue #34 item 2): the Redis
// passwords and the stunnel hop's certificates of a cluster whose shared Redis h3pipe runs
// (/redis/managed), made once and handed to each host (supervisor/cluster_credentials.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/cli.h"
#include "common/supervisor/cluster_credentials.h"

namespace h3pipe::cli {
namespace fs = std::filesystem;
namespace {

struct CredentialsArgs {
  std::string dir;   // --dir: the credentials folder (default: /redis/credentials_dir)
  std::string host;  // export --host
  std::string out;   // export -o
};

// The folder: --dir, else the config's /redis/credentials_dir.
Result<fs::path> folder(const config::Cluster& c, const CredentialsArgs& a, const char* verb) {
  if (!a.dir.empty()) return fs::path(a.dir);
  if (!c.redis.credentials_dir.empty()) return fs::path(c.redis.credentials_dir);
  return make_error(errc::cli::kFlag,
                    "credentials {}: the config sets no /redis/credentials_dir; pass --dir DIR "
                    "(or --config FILE with /redis/credentials_dir)",
                    verb);
}

int cmd_init(const Global& g, const CredentialsArgs& a) {
  auto c = load_cluster(g);
  if (!c.ok()) return fail(c.error(), "credentials init");
  auto dir = folder(*c, a, "init");
  if (!dir.ok()) return fail(dir.error());
  auto w = supervisor::init_credentials(*c, *dir);
  if (!w.ok()) return fail(w.error(), "credentials init");
  fmt::print("credentials in {} (0700; files 0600): {} created, {} kept\n", dir->string(),
             w->created.size(), w->kept.size());
  for (const auto& f : w->created) fmt::print("  created {}\n", f.filename().string());
  if (const auto* rh = supervisor::redis_host(*c)) {
    fmt::print("next: `h3pipe start --host {}` runs the shared Redis there", rh->name);
    if (c->hosts.size() > 1)
      fmt::print(
          "; for each other host: `h3pipe credentials export --host NAME -o DIR` and copy DIR "
          "to its /redis/credentials_dir");
    fmt::print("\n");
  }
  return kExitOk;
}

int cmd_export(const Global& g, const CredentialsArgs& a) {
  auto c = load_cluster(g);
  if (!c.ok()) return fail(c.error(), "credentials export");
  auto dir = folder(*c, a, "export");
  if (!dir.ok()) return fail(dir.error());
  if (fs::exists(a.out) && !fs::is_empty(a.out)) {
    fmt::print(stderr, "credentials export: {} exists and is not empty; choose a new folder\n",
               a.out);
    return kExitUsage;
  }
  auto files = supervisor::export_credentials(*c, a.host, *dir, a.out);
  if (!files.ok()) return fail(files.error(), "credentials export");
  fmt::print("credentials for host {} in {} (0700; files 0600):\n", a.host, a.out);
  for (const auto& f : *files) fmt::print("  {}\n", f.filename().string());
  fmt::print("copy the folder to host {} as its /redis/credentials_dir ({})\n", a.host,
             c->redis.credentials_dir.empty() ? "set it in the config" : c->redis.credentials_dir);
  return kExitOk;
}

}  // namespace

void register_credentials_commands(CLI::App& app, Global& g, int& rc) {
  static CredentialsArgs a;
  CLI::App* cr = app.add_subcommand(
      "credentials",
      "the shared Redis's passwords and TLS certificates (/redis/managed): init, export");
  cr->require_subcommand(1);
  CLI::App* init = cr->add_subcommand(
      "init",
      "make the missing redis-<role>.password files (not a managed Redis's admin) and, with TLS, "
      "the CA, the Redis host's server pair and each other host's client pair, in "
      "/redis/credentials_dir or --dir");
  init->add_option("--dir", a.dir, "credentials folder (default: the config's credentials_dir)");
  init->callback([&g, &rc] { rc = cmd_init(g, a); });
  CLI::App* ex = cr->add_subcommand(
      "export",
      "copy to DIR exactly the secrets host NAME needs (never redis-admin: the Redis host's "
      "start makes its own; never the CA key)");
  ex->add_option("--host", a.host, "the host")->required();
  ex->add_option("-o,--output", a.out, "the folder to write (new or empty)")->required();
  ex->add_option("--dir", a.dir, "credentials folder (default: the config's credentials_dir)");
  ex->callback([&g, &rc] { rc = cmd_export(g, a); });
}

}  // namespace h3pipe::cli
