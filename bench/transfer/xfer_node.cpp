// A stand-alone transfer node for the network-namespace tests and the benchmark: one receiver or
// one sender, no Redis, events as JSON lines (CLOCK_MONOTONIC ns, shared by every namespace of
// the host) so that the test or bench script can measure and count.
//
//   xfer_node receive --bind tcp://10.0.0.2:7000 --root DIR --keys DIR --log FILE
//   xfer_node send --peer B=tcp://10.0.0.2:7000 --root DIR --outbox DIR --keys DIR --log FILE
//                  [--task RUN/JOB/latent.h3latent ...] [--sequential] [--exit-after N]
//
// Keys: DIR/receiver.{key,pub} and DIR/sender.{key,pub} (created by `xfer_node keygen DIR`).
// TEST ONLY: H3PIPE_TEST_ONLY_CORRUPT_ATTEMPTS=N makes the sender flip a bit in the first chunk of
// each of the first N attempts of every transfer (SenderOptions::test_only_corrupt_attempts).
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/latent/latent.h"
#include "common/logging/log.h"
#include "common/transfer/frames.h"
#include "common/transfer/keys.h"
#include "common/transfer/outbox.h"
#include "common/transfer/receiver.h"
#include "common/transfer/sender.h"

using namespace h3pipe;
using namespace h3pipe::transfer;
namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop = true;
}

long long mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// CPU seconds (user + system) this process used so far, all threads: the benchmark divides it by
// the transfers to show what a hand-off costs besides the wire (CURVE, SHA-256, copies, syncs).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

class EventLog {
 public:
  explicit EventLog(const std::string& path) : out_(path, std::ios::app) {}
  void write(nlohmann::json j) {
    j["t_ns"] = mono_ns();
    std::lock_guard<std::mutex> l(mu_);
    out_ << j.dump() << "\n";
    out_.flush();
  }

 private:
  std::mutex mu_;
  std::ofstream out_;
};

struct Common {
  std::string keys, log = "/dev/stdout";
  std::string as = "sender";  // key pair the sender presents (tests use "stranger")
  bool no_curve = false, no_eager = false, no_data_frames = false;
  std::uint32_t chunk = 256 * 1024, window = 32;
  int heartbeat_ms = 500, dead_after_ms = 3000;
  int data_port = 0;  // receiver: its data connection's port (0: a free one)
};

int receive(const Common& c, const std::string& bind, const std::string& root) {
  zmq::context_t ctx(1);
  prometheus::Registry reg;
  TransferProbe probe(reg, "receiver");
  EventLog log(c.log);
  ReceiverOptions o;
  o.bind_endpoint = bind;
  o.root = root;
  o.chunk_bytes = c.chunk;
  o.window = c.window;
  o.heartbeat_ms = c.heartbeat_ms;
  o.dead_after_ms = c.dead_after_ms;
  o.curve.enabled = !c.no_curve;
  o.data_frames = !c.no_data_frames;
  o.data_port = static_cast<std::uint16_t>(c.data_port);
  if (o.curve.enabled) {
    o.curve.secret_key = load_key_file(fs::path(c.keys) / "receiver.key", true).value();
    o.curve.public_key = load_key_file(fs::path(c.keys) / "receiver.pub", false).value();
    o.curve.allowed_clients = {load_key_file(fs::path(c.keys) / "sender.pub", false).value()};
  }
  auto r = TransferReceiver::start(
      ctx, o,
      [&](const pb::Offer& offer, const fs::path& p, const std::string& sha) -> Status {
        log.write({{"event", "durable"},
                   {"run", offer.run_id()},
                   {"job", offer.job_id()},
                   {"sha256", sha},
                   {"size", offer.size()},
                   {"path", p.string()},
                   {"received_total", probe.bytes()},
                   {"resumed_total", probe.resumed_bytes()},
                   {"integrity_failures", probe.integrity_failures()},
                   // The hand-off's breakdown (issue #24): receiver-side phases of this delivery.
                   {"offer_ns", current_delivery() ? current_delivery()->started_ns : 0},
                   {"offer_s", current_delivery() ? current_delivery()->offer_s : 0},
                   {"wire_s", current_delivery() ? current_delivery()->wire_s : 0},
                   {"verify_s", current_delivery() ? current_delivery()->verify_s : 0},
                   {"check_s", current_delivery() ? current_delivery()->check_s : 0},
                   {"commit_s", current_delivery() ? current_delivery()->commit_s : 0}});
        return {};
      },
      probe);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.error().to_string().c_str());
    return 2;
  }
  log.write({{"event", "ready"},
             {"endpoint", (*r)->endpoint()},
             {"data_endpoint", (*r)->data_endpoint()}});
  double last[3] = {-1, -1, -1};
  while (!g_stop) {  // a stats line whenever a counter moves (tests wait on these)
    double now[3] = {static_cast<double>((*r)->zap_refused()), probe.protocol_errors(),
                     probe.dead_peers()};
    if (!std::equal(now, now + 3, last)) {
      log.write({{"event", "stats"},
                 {"zap_refused", now[0]},
                 {"protocol_errors", now[1]},
                 {"dead_peers", now[2]},
                 {"received_total", probe.bytes()}});
      std::copy(now, now + 3, last);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  log.write({{"event", "stopped"},
             {"cpu_s", cpu_seconds()},
             {"zap_refused", (*r)->zap_refused()},
             {"protocol_errors", probe.protocol_errors()},
             {"received_total", probe.bytes()}});
  return 0;
}

int send(const Common& c, const std::string& peer, const std::string& root,
         const std::string& outbox, const std::vector<std::string>& tasks, bool sequential,
         int exit_after, int max_attempts, const std::string& run, int rescan_ms) {
  zmq::context_t ctx(1);
  prometheus::Registry reg;
  TransferProbe probe(reg, "sender");
  EventLog log(c.log);
  auto eq = peer.find('=');
  SenderOptions o;
  o.host = "A";
  o.root = root;
  o.outbox = outbox;
  o.heartbeat_ms = c.heartbeat_ms;
  o.dead_after_ms = c.dead_after_ms;
  o.max_attempts = max_attempts;
  o.rescan_ms = rescan_ms;
  const EagerSpan eager = eager_span_for(c.chunk, c.window);
  o.eager_bytes = c.no_eager ? 0 : eager.bytes;
  o.eager_chunk_bytes = eager.chunk;
  o.curve.enabled = !c.no_curve;
  o.data_frames = !c.no_data_frames;
  std::string server_key;
  if (o.curve.enabled) {
    o.curve.secret_key = load_key_file(fs::path(c.keys) / (c.as + ".key"), true).value();
    o.curve.public_key = load_key_file(fs::path(c.keys) / (c.as + ".pub"), false).value();
    server_key = load_key_file(fs::path(c.keys) / "receiver.pub", false).value();
  }
  o.peers = {{peer.substr(0, eq), peer.substr(eq + 1), server_key}};
  if (const char* e = std::getenv("H3PIPE_TEST_ONLY_CORRUPT_ATTEMPTS"))
    o.test_only_corrupt_attempts = std::atoi(e);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  o.on_sent = [&](const SendReport& r) {
    log.write({{"event", "sent"},
               {"run", r.task.run_id()},
               {"job", r.task.job_id()},
               {"sha256", r.sha256},
               {"size", r.size},
               {"bytes_sent", r.bytes_sent},
               {"resumed_from", r.resumed_from},
               {"attempts", r.attempts},
               {"sealed", r.sealed},
               {"sealed_total", probe.sealed_latents()},
               {"curve_total", probe.curve_latents()},
               {"data_fallbacks", probe.data_fallbacks()},
               {"seconds", r.seconds}});
    std::lock_guard<std::mutex> l(mu);
    ++finished;
    cv.notify_all();
  };
  o.on_failed = [&](const pb::StageTask& t, const Error& e) {
    log.write({{"event", "failed"},
               {"run", t.run_id()},
               {"job", t.job_id()},
               {"code", e.code},
               {"reason", e.message}});
    std::lock_guard<std::mutex> l(mu);
    ++finished;
    cv.notify_all();
  };
  auto s = TransferSender::start(ctx, o, probe);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.error().to_string().c_str());
    return 2;
  }
  log.write({{"event", "ready"}});
  int submitted = 0;
  for (const auto& rel : tasks) {
    fs::path p(rel);
    pb::StageTask t;
    t.set_run_id(p.begin()->string());
    t.set_job_id(std::next(p.begin())->string());
    std::string input = rel;
    if (!run.empty()) {
      // A repeat: a hard link of the same file (and sidecar) under a fresh run/job, so that the
      // receiver sees a new latent while the bytes stay in the page cache.
      t.set_run_id(run);
      t.set_job_id(t.job_id() + "-" + std::to_string(submitted));
      input = run + "/" + t.job_id() + "/" + p.filename().string();
      fs::create_directories(fs::path(root) / run / t.job_id());
      std::error_code ec;
      fs::create_hard_link(fs::path(root) / rel, fs::path(root) / input, ec);
      fs::create_hard_link(fs::path(root) / (rel + ".sha256"), fs::path(root) / (input + ".sha256"),
                           ec);
    }
    t.set_stage(pb::STAGE_DECODE);
    t.set_input_path(input);
    t.set_target_host(o.peers[0].host);
    if (!outbox.empty()) (void)record_task(outbox, t);
    log.write({{"event", "submit"}, {"run", t.run_id()}, {"job", t.job_id()}});
    (*s)->submit(t);
    ++submitted;
    if (sequential) {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return finished >= submitted || g_stop; });
    }
  }
  {
    std::unique_lock<std::mutex> l(mu);
    double dead = 0;
    while (!g_stop && (exit_after <= 0 || finished < exit_after)) {
      cv.wait_for(l, std::chrono::milliseconds(20));
      if (probe.dead_peers() != dead) {
        dead = probe.dead_peers();
        log.write({{"event", "stats"}, {"dead_peers", dead}});
      }
    }
  }
  log.write({{"event", "stopped"},
             {"cpu_s", cpu_seconds()},
             {"bytes_sent", probe.bytes()},
             {"retries", probe.retries()}});
  return 0;
}

// A misbehaving peer: one frame larger than the receiver's ZMQ_MAXMSGSIZE.
int flood(const Common& c, const std::string& peer) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  if (!c.no_curve) {
    s.set(zmq::sockopt::curve_serverkey,
          load_key_file(fs::path(c.keys) / "receiver.pub", false).value());
    s.set(zmq::sockopt::curve_publickey,
          load_key_file(fs::path(c.keys) / (c.as + ".pub"), false).value());
    s.set(zmq::sockopt::curve_secretkey,
          load_key_file(fs::path(c.keys) / (c.as + ".key"), true).value());
  }
  zmq_socket_monitor(s.handle(), "inproc://flood-mon",
                     ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
  zmq::socket_t mon(ctx, zmq::socket_type::pair);
  mon.connect("inproc://flood-mon");
  s.connect(peer.substr(peer.find('=') + 1));
  auto next_event = [&]() -> int {
    zmq::pollitem_t it{mon.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&it, 1, std::chrono::milliseconds(5000)) == 0) return -1;
    zmq::message_t ev, addr;
    (void)mon.recv(ev);
    (void)mon.recv(addr);
    std::uint16_t e;
    std::memcpy(&e, ev.data(), 2);
    return e;
  };
  if (next_event() != ZMQ_EVENT_HANDSHAKE_SUCCEEDED) return 3;
  std::string huge(max_message_bytes(c.chunk) + 1, 'x');
  s.send(zmq::buffer(huge), zmq::send_flags::none);
  int e = next_event();
  zmq_socket_monitor(s.handle(), nullptr, 0);
  std::printf("%s\n", e == ZMQ_EVENT_DISCONNECTED ? "disconnected" : "still connected");
  return e == ZMQ_EVENT_DISCONNECTED ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xfer_node: transfer test/bench node"};
  app.require_subcommand(1);
  Common c;
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--keys", c.keys, "key directory (receiver.*, sender.*)");
    sub->add_option("--log", c.log, "JSON lines event log");
    sub->add_flag("--no-curve", c.no_curve, "plain TCP (loopback comparisons only)");
    sub->add_option("--chunk", c.chunk);
    sub->add_flag("--no-eager", c.no_eager, "sender: wait for the offer's reply before sending");
    sub->add_flag("--no-data-frames", c.no_data_frames,
                  "CURVE carries every byte (no AES-256-GCM data connection; issue #36 item 8)");
    sub->add_option("--window", c.window);
    sub->add_option("--heartbeat-ms", c.heartbeat_ms);
    sub->add_option("--dead-after-ms", c.dead_after_ms);
    sub->add_option("--as", c.as, "key pair name the sender presents");
    sub->add_option("--data-port", c.data_port, "receiver: the data connection's port");
  };
  std::string bind, root, peer, outbox, run, keydir;
  std::vector<std::string> tasks;
  bool sequential = false;
  int exit_after = 0, max_attempts = 5;
  auto* rc = app.add_subcommand("receive");
  add_common(rc);
  rc->add_option("--bind", bind)->required();
  rc->add_option("--root", root)->required();
  auto* sc = app.add_subcommand("send");
  add_common(sc);
  sc->add_option("--peer", peer, "HOST=ENDPOINT")->required();
  sc->add_option("--root", root)->required();
  sc->add_option("--outbox", outbox);
  sc->add_option("--task", tasks, "RUN/JOB/FILE relative to root");
  sc->add_option("--run", run, "rename tasks' run id and number the jobs (benchmark repeats)");
  sc->add_flag("--sequential", sequential, "submit the next task after the previous one finished");
  sc->add_option("--exit-after", exit_after, "exit after N tasks finished (0 = run until SIGTERM)");
  sc->add_option("--max-attempts", max_attempts);
  int rescan_ms = 0;
  sc->add_option("--rescan-ms", rescan_ms, "outbox rescan period (0 = only at start)");
  auto* fc = app.add_subcommand("flood",
                                "connect with an allowed key, send one oversize frame, "
                                "exit 0 when the receiver disconnects us");
  add_common(fc);
  fc->add_option("--peer", peer, "HOST=ENDPOINT")->required();
  auto* mc = app.add_subcommand("mklatent",
                                "write a latent of a job's geometry (random values) + sidecar");
  std::string mk_path;
  std::uint32_t mk_w = 736, mk_h = 416, mk_frames = 124, mk_fps = 24;
  mc->add_option("path", mk_path)->required();
  mc->add_option("--width", mk_w);
  mc->add_option("--height", mk_h);
  mc->add_option("--frames", mk_frames);
  mc->add_option("--fps", mk_fps);
  auto* kc = app.add_subcommand("keygen");
  kc->add_option("dir", keydir)->required();
  CLI11_PARSE(app, argc, argv);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  if (!std::getenv("XFER_NO_MALLOPT")) tune_allocator();
  h3pipe::logging::configure("xfer_node",
                             "info");  // the loggers write to stderr: stdout stays for results
  if (kc->parsed()) {
    for (const char* n : {"receiver", "sender", "stranger"}) {
      auto kp = keygen(keydir, n, true);
      if (!kp.ok()) {
        std::fprintf(stderr, "%s\n", kp.error().to_string().c_str());
        return 2;
      }
    }
    return 0;
  }
  if (mc->parsed()) {
    latent::Latent l = latent::make_latent(
        latent::builtin_profile(),
        {static_cast<std::uint32_t>(mk_w), static_cast<std::uint32_t>(mk_h),
         static_cast<std::uint32_t>(mk_frames), static_cast<std::uint32_t>(mk_fps)});
    std::mt19937 rng(42);
    std::normal_distribution<float> nd;
    for (auto& v : l.video) v = nd(rng);
    for (auto& v : l.audio) v = nd(rng);
    l.metadata = {{"writer", "xfer_node mklatent"}};
    auto sha = latent::write_latent(mk_path, l);
    if (!sha.ok()) {
      std::fprintf(stderr, "%s\n", sha.error().to_string().c_str());
      return 2;
    }
    std::printf("%s %zu\n", sha->c_str(), static_cast<std::size_t>(fs::file_size(mk_path)));
    return 0;
  }
  if (rc->parsed()) return receive(c, bind, root);
  if (fc->parsed()) return flood(c, peer);
  return send(c, peer, root, outbox, tasks, sequential, exit_after, max_attempts, run, rescan_ms);
}
