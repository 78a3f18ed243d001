// h3pipe-api: the HTTP front door (issue #37; docs/api.md).  A thin main: flags, the Redis login,
// then common/api's Server until SIGINT/SIGTERM.
//
//   h3pipe-api [--config FILE] [--state-dir DIR] [--bind 127.0.0.1] [--port 8088]
//              [--max-body-bytes N] [--port-file FILE] [--run-file FILE] [--ui-dir DIR]
//              [--host NAME] [--metrics-port N] [--metrics-bind ADDR] [--advertise-url URL]
//              [--webhook-ca-file FILE] [--tls-cert FILE --tls-key FILE] [--redis ADDR]
//
// --host NAME takes the bind address and ports of /hosts[NAME] (api_bind, api_port,
// api_metrics_port; flags given win) and announces this API's URL in Redis for the other hosts'
// APIs (common/api/peers.h), as `h3pipe start` runs it.
//
// Redis: the running local stack of the config's state dir (its address and the operator's
// credentials, as the CLI finds them), else the config's redis with H3PIPE_REDIS_USER /
// H3PIPE_REDIS_PASSWORD_FILE / H3PIPE_REDIS_ADDRESS as every service takes them; --redis ADDR
// over both (`h3pipe start` passes its stack's socket and the operator's credentials).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/api/peers.h"
#include "common/api/server.h"
#include "common/api/tls_front.h"
#include "common/api/upload_sweep.h"
#include "common/api/webhook_dispatch.h"
#include "common/core/error_codes.h"
#include "common/logging/protobuf_log.h"
#include "common/metrics/http_servers.h"
#include "common/queue/redis.h"
#include "common/queue/redis_config.h"
#include "common/supervisor/credentials.h"
#include "common/supervisor/supervisor.h"

using namespace h3pipe;

namespace {

// `stack`: the local stack's Redis once one was found.  Every reconnect asks again (its
// credentials may change), but once a stack was seen the config's address is never taken: while
// the stack's Redis restarts (a kill -9) the stack reads as not running, and the config's
// host:port may then be anyone's (#35 D1: a squatter got the webhook dispatcher's commands).
// `pinned` (--redis, as `h3pipe start` passes its socket): that address whatever else says, so
// that even before the supervisor has written stack.json nothing is sent to the config's.
Result<queue::RedisAddress> redis_login(const config::Cluster& c, const std::string& pinned,
                                        std::optional<queue::RedisAddress>& stack) {
  queue::RedisAddress a = stack ? *stack : queue::address_of(c.redis);
  if (auto st = supervisor::running(c)) {
    a.host = (*st)["redis"]["host"];
    a.port = (*st)["redis"]["port"];
    const std::string creds = (*st)["redis"].value("credentials_dir", "");
    if (!creds.empty()) {
      const auto u = supervisor::user_for(creds, "operator");
      config::Redis r;
      r.password_file = u.password_file;
      a.user = u.user;
      a.password = r.password();
    }
    stack = a;
  }
  if (const char* u = std::getenv("H3PIPE_REDIS_USER"); u && *u) a.user = u;
  if (const char* f = std::getenv("H3PIPE_REDIS_PASSWORD_FILE"); f && *f) {
    config::Redis r;
    r.password_file = f;
    a.password = r.password();
  }
  if (const char* s = std::getenv("H3PIPE_REDIS_ADDRESS"); s && *s) queue::set_address(a, s);
  if (!pinned.empty() && !queue::set_address(a, pinned)) {  // a bare name: that host, no port
    a.host = pinned;
    a.port = 0;
    a.sentinels.clear();
  }
  return a;
}

// The console's bundle beside the binary: BIN/../ui (the build tree: build/bin and build/ui),
// else BIN/../share/h3pipe/ui (an install).
std::string default_ui_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const auto bin = exe.parent_path();
  for (const auto& d : {bin.parent_path() / "ui", bin.parent_path() / "share" / "h3pipe" / "ui"})
    if (std::filesystem::is_regular_file(d / "index.html", ec)) return d.string();
  return (bin.parent_path() / "ui").string();
}

// --webhook-ca-file FILE: put in the environment the webhook dispatcher reads
// (H3PIPE_WEBHOOK_CA_FILE, which it also takes as is), and checked once the flags are parsed:
// exit 2 naming it when the file cannot be read or holds no certificate.
void add_webhook_ca_flag(CLI::App& app) {
  static std::string file;
  app.add_option("--webhook-ca-file", file,
                 "PEM CA bundle that https webhook endpoints are verified against instead of the "
                 "system's (default: $H3PIPE_WEBHOOK_CA_FILE, else the system's)");
  app.parse_complete_callback([] {
    if (!file.empty()) ::setenv("H3PIPE_WEBHOOK_CA_FILE", file.c_str(), 1);
    if (auto bad = api::check_webhook_ca_file()) throw CLI::ParseError(*bad, 2);
  });
}

// Everything the command line sets.
struct Flags {
  std::string config_file, state_dir, port_file, run_file, rate_limit, metrics_bind, redis;
  int metrics_port = -1;
  api::ServerOptions o;
  std::string tls_cert_label = "--tls-cert", tls_key_label = "--tls-key";
};

void add_flags(CLI::App& app, Flags& f) {
  api::ServerOptions& o = f.o;
  app.add_option("--config", f.config_file, "cluster config JSON (default: the embedded one)");
  app.add_option("--state-dir", f.state_dir, "state dir, over the config's");
  app.add_option("--redis", f.redis,
                 "HOST:PORT or Unix socket path of Redis, over the running stack's and the "
                 "config's (`h3pipe start` passes its socket)");
  app.add_option("--bind", o.bind, "address to listen on (default 127.0.0.1: loopback only)");
  app.add_option("--port", o.port, "port (0: a free one; default 8088)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--max-body-bytes", o.max_body_bytes, "a larger request body gets 413")
      ->check(CLI::Range(1024, 1 << 30));
  app.add_option("--rate-limit", f.rate_limit,
                 "requests per second per token by role: ROLE=N[,ROLE=N] (default "
                 "read=100,submit=50,admin=0; 0: unlimited); 429 beyond (docs/api.md)");
  app.add_option("--max-upload-bytes", o.max_upload_bytes,
                 "a multipart POST /v1/videos (with input_reference) may be this large; 413 "
                 "beyond (default 32 MiB)")
      ->check(CLI::Range(1024, 1 << 30));
  app.add_option("--port-file", f.port_file, "write the port bound here once listening");
  app.add_option("--run-file", f.run_file,
                 "write {pid, bind, health_port, metrics_port, api_url} here once listening "
                 "(`h3pipe start` reads it: /readyz on that port)");
  app.add_option("--host", o.host,
                 "this host's name in the config: its api_bind, api_port and api_metrics_port, "
                 "and peers serve it the videos decoded on their disks");
  app.add_option("--metrics-port", f.metrics_port,
                 "Prometheus port on the host's bind address (0: a free one; default: the host's "
                 "api_metrics_port with --host, else none)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-bind", f.metrics_bind,
                 "address of the Prometheus port (default: --bind's, or the host's bind with "
                 "--host)");
  app.add_option("--advertise-url", o.advertise_url,
                 "the URL other hosts' APIs reach this one on (default: http://BIND:PORT/v1, the "
                 "host's address when BIND is 0.0.0.0)");
  o.ui_dir = default_ui_dir();
  app.add_option("--ui-dir", o.ui_dir,
                 "the console's bundle, served under /ui/ (default: ../ui or ../share/h3pipe/ui "
                 "beside this binary)");
  app.add_option("--tls-cert", o.tls_cert,
                 "serve HTTPS (TLS 1.2+) on the port with this PEM certificate chain; needs "
                 "--tls-key (default: none, plain HTTP)");
  app.add_option("--tls-key", o.tls_key,
                 "the certificate's PEM private key; refused unless mode 0600 or 0400");
  add_webhook_ca_flag(app);
}

// The config with the flags applied: --state-dir, and --host's bind address and ports where the
// flags leave them unset.  Exit code 2 (printed why) for a bad rate limit, config or host.
Result<config::Cluster> settle(const CLI::App& app, Flags& f) {
  api::ServerOptions& o = f.o;
  if (auto bad =
          api::parse_rate_limits(f.rate_limit.empty() ? "read=100" : f.rate_limit, o.rate_limits))
    return make_error(errc::cli::kFlag, "{}", *bad);
  auto c = f.config_file.empty() ? config::embedded_default() : config::load_file(f.config_file);
  if (!c.ok()) return c.error();
  if (!f.state_dir.empty()) config::override_state_dir(*c, f.state_dir);
  const bool metrics_bind_given = !f.metrics_bind.empty();
  if (!metrics_bind_given) f.metrics_bind = o.bind;
  if (o.host.empty()) return c;
  const config::Host* h = c->find_host(o.host);
  if (!h)
    return make_error(errc::cli::kFlag, "h3pipe-api: --host \"{}\" is not a host of the config",
                      o.host);
  if (!app.count("--bind")) o.bind = h->api_bind;
  if (!app.count("--port")) o.port = h->api_port;
  if (!app.count("--metrics-port")) f.metrics_port = h->api_metrics_port;
  if (!app.count("--tls-cert") && !app.count("--tls-key") && !h->api_tls_cert.empty()) {
    const std::string at = fmt::format("/hosts/{}/", h - c->hosts.data());  // errors name them
    o.tls_cert = h->api_tls_cert;
    o.tls_key = h->api_tls_key;
    f.tls_cert_label = at + "api_tls_cert";
    f.tls_key_label = at + "api_tls_key";
  }
  if (!metrics_bind_given)  // where Prometheus scrapes the host's services
    f.metrics_bind = h->bind.empty() ? o.bind : h->bind;
  return c;
}

// Written whole or not at all (a temporary renamed over it).
void write_file(const std::string& file, const std::string& text) {
  const std::string tmp = file + ".tmp";
  std::ofstream(tmp) << text << "\n";
  std::rename(tmp.c_str(), file.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  logging::route_protobuf_logs();
  CLI::App app{"h3pipe-api: jobs over HTTP (the /v1/videos API the OpenAI SDKs speak)"};
  Flags f;
  add_flags(app, f);
  CLI11_PARSE(app, argc, argv);
  auto c = settle(app, f);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return 2;
  }
  const api::ServerOptions& o = f.o;
  // --tls-cert / --tls-key: both or neither, a key only its owner reads, a pair that matches
  // (exit 2 naming the file); loaded again by the server.
  if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    auto tls = o.tls_cert.empty() || o.tls_key.empty()
                   ? Result<std::unique_ptr<api::TlsFront>>(make_error(
                         errc::cli::kFlag, "--tls-cert and --tls-key go together (got only {})",
                         o.tls_cert.empty() ? "--tls-key" : "--tls-cert"))
                   : api::TlsFront::create({.cert_file = o.tls_cert,
                                            .key_file = o.tls_key,
                                            .cert_label = f.tls_cert_label,
                                            .key_label = f.tls_key_label});
    if (!tls.ok()) {
      fmt::print(stderr, "h3pipe-api: {}\n", tls.error().message);
      return 2;
    }
  }
  // What a killed API left mid-upload (upload_sweep.h): temporaries no upload wrote for a minute.
  if (!c->limits.input_roots.empty())
    if (const std::size_t n = api::sweep_dead_uploads(c->limits.input_roots.front()))
      fmt::print(stderr, "h3pipe-api: removed {} temporaries of interrupted uploads under {}\n", n,
                 (c->limits.input_roots.front() / "api-uploads").string());
  // Signals are taken by a thread of their own, which stops the server.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const config::Cluster cluster = *c;
  api::Server server(
      cluster,
      [cluster, pinned = f.redis,
       stack = std::make_shared<std::pair<std::mutex, std::optional<queue::RedisAddress>>>()]()
          -> Result<std::unique_ptr<queue::Redis>> {
        Result<queue::RedisAddress> a = [&] {
          std::lock_guard<std::mutex> l(stack->first);
          return redis_login(cluster, pinned, stack->second);
        }();
        if (!a.ok()) return a.error();
        return queue::Redis::connect(*a);
      },
      o);
  auto port = server.bind();
  if (!port.ok()) {
    fmt::print(stderr, "h3pipe-api: {}\n", port.error().message);
    return 1;
  }
  std::thread sig([&] {
    int s = 0;
    sigwait(&set, &s);
    server.stop();
  });
  sig.detach();
  const std::string url =
      api::advertised_url(cluster, o.host, o.bind, *port, o.advertise_url, !o.tls_cert.empty());
  fmt::print(stderr, "h3pipe-api: listening on {}:{} ({})\n", o.bind, *port, url);
  std::unique_ptr<metrics::MetricsServer> metrics;
  if (f.metrics_port >= 0) {
    auto m = metrics::MetricsServer::start(f.metrics_bind, f.metrics_port, server.registry());
    if (!m.ok()) {  // 98: the supervisor then restarts it on a free metrics port
      fmt::print(stderr, "h3pipe-api: {}\n", m.error().message);
      return 98;
    }
    metrics = std::move(*m);
  }
  if (!f.port_file.empty()) write_file(f.port_file, std::to_string(*port));
  if (!f.run_file.empty()) {
    nlohmann::json run = {{"pid", ::getpid()},
                          {"bind", o.bind},
                          {"health_port", *port},
                          {"metrics_port", metrics ? metrics->port() : 0},
                          {"api_url", url}};
    // HTTPS: `start` probes /readyz trusting this certificate (supervisor/api_tls.h).
    if (!o.tls_cert.empty()) run["tls_cert"] = std::filesystem::absolute(o.tls_cert).string();
    write_file(f.run_file, run.dump());
  }
  server.listen();
  return 0;
}
