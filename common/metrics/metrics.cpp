#include "common/metrics/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace h3pipe::metrics {

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& bind, int port,
                                                            std::shared_ptr<prometheus::Registry> registry) {
  auto s = std::make_unique<MetricsServer>();
  try {
    s->exposer_ = std::make_unique<prometheus::Exposer>(fmt::format("{}:{}", bind, port), 2);
  } catch (const std::exception& e) {
    return make_error("metrics.bind", "cannot serve metrics on {}:{}: {}", bind, port, e.what());
  }
  s->exposer_->RegisterCollectable(registry);
  auto ports = s->exposer_->GetListeningPorts();
  s->port_ = ports.empty() ? port : ports.front();
  return s;
}

Result<std::unique_ptr<HealthServer>> HealthServer::start(const std::string& bind, int port) {
  auto h = std::unique_ptr<HealthServer>(new HealthServer());
  h->fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(h->fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, bind.c_str(), &a.sin_addr) != 1)
    return make_error("health.bind", "health endpoint: \"{}\" is not an IPv4 address", bind);
  if (::bind(h->fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(h->fd_, 16) != 0)
    return make_error("health.bind", "cannot serve health on {}:{}: {}", bind, port, std::strerror(errno));
  socklen_t len = sizeof a;
  ::getsockname(h->fd_, reinterpret_cast<sockaddr*>(&a), &len);
  h->port_ = ntohs(a.sin_port);
  h->thread_ = std::thread([p = h.get()] { p->loop(); });
  return h;
}

HealthServer::~HealthServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void HealthServer::loop() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    pollfd pc{c, POLLIN, 0};
    char buf[512] = {};
    if (::poll(&pc, 1, 1000) > 0) (void)::read(c, buf, sizeof buf - 1);
    bool ready_path = std::strncmp(buf, "GET /readyz", 11) == 0;
    bool live_path = std::strncmp(buf, "GET /healthz", 12) == 0;
    const char* status = "404 Not Found";
    const char* body = "not found\n";
    if (live_path) { status = "200 OK"; body = "ok\n"; }
    if (ready_path) {
      status = ready_ ? "200 OK" : "503 Service Unavailable";
      body = ready_ ? "ready\n" : "not ready\n";
    }
    std::string resp = fmt::format("HTTP/1.0 {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                                   status, std::strlen(body), body);
    (void)::write(c, resp.data(), resp.size());
    ::close(c);
  }
}

namespace {
prometheus::Histogram::BucketBoundaries seconds_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640};
}
}  // namespace

WorkerProbe::WorkerProbe(prometheus::Registry& reg, const std::string& stage, const std::string& pool,
                         const std::string& host)
    : tasks_(prometheus::BuildCounter().Name("h3pipe_stage_tasks_total")
                 .Help("Stage tasks finished, by outcome (ok, skipped, retry, dead_letter)").Register(reg)),
      reclaims_(prometheus::BuildCounter().Name("h3pipe_stage_reclaims_total")
                    .Help("Tasks this worker took over, by reason (expired_lease, own_pending)").Register(reg)),
      ok_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "ok"}})),
      skipped_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "skipped"}})),
      retry_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "retry"}})),
      dead_(tasks_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"outcome", "dead_letter"}})),
      lease_lost_(prometheus::BuildCounter().Name("h3pipe_stage_leases_lost_total")
                      .Help("Lease renewals refused because another worker owned the task").Register(reg)
                      .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      bubble_(prometheus::BuildCounter().Name("h3pipe_pool_bubble_seconds_total")
                  .Help("Seconds this pool sat idle while work waited in its stage queue").Register(reg)
                  .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      bytes_(prometheus::BuildCounter().Name("h3pipe_stage_output_bytes_total")
                 .Help("Bytes of stage outputs written").Register(reg)
                 .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      seconds_(prometheus::BuildHistogram().Name("h3pipe_stage_seconds")
                   .Help("Wall seconds of one stage execution (runtime + artifact write)").Register(reg)
                   .Add({{"stage", stage}, {"pool", pool}, {"host", host}}, seconds_buckets())),
      wait_(prometheus::BuildHistogram().Name("h3pipe_stage_queue_wait_seconds")
                .Help("Seconds a task waited in its stage queue before it was claimed").Register(reg)
                .Add({{"stage", stage}, {"pool", pool}, {"host", host}}, seconds_buckets())),
      busy_(prometheus::BuildGauge().Name("h3pipe_pool_busy")
                .Help("1 while the pool is executing a task").Register(reg)
                .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      depth_(prometheus::BuildGauge().Name("h3pipe_stage_queue_depth")
                 .Help("Tasks in the stage stream (pending + undelivered) seen by this pool").Register(reg)
                 .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      up_(prometheus::BuildGauge().Name("h3pipe_service_up")
              .Help("1 while the service runs").Register(reg)
              .Add({{"stage", stage}, {"pool", pool}, {"host", host}})),
      labels_{{"stage", stage}, {"pool", pool}, {"host", host}} {
  up_.Set(1);
  reclaims_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"reason", "expired_lease"}});
  reclaims_.Add({{"stage", stage}, {"pool", pool}, {"host", host}, {"reason", "own_pending"}});
}

void WorkerProbe::task_done(double s, double w) { ok_.Increment(); seconds_.Observe(s); wait_.Observe(w); }
void WorkerProbe::task_skipped() { skipped_.Increment(); }
void WorkerProbe::task_retry() { retry_.Increment(); }
void WorkerProbe::task_dead_lettered() { dead_.Increment(); }
void WorkerProbe::reclaimed(const std::string& reason) {
  auto l = labels_;
  l["reason"] = reason;
  reclaims_.Add(l).Increment();
}
void WorkerProbe::lease_lost() { lease_lost_.Increment(); }
void WorkerProbe::set_busy(bool b) { busy_.Set(b ? 1 : 0); }
void WorkerProbe::add_bubble(double s) { bubble_.Increment(s); }
void WorkerProbe::set_queue_depth(double d) { depth_.Set(d); }
void WorkerProbe::add_bytes(double b) { bytes_.Increment(b); }
double WorkerProbe::count(const std::string& outcome) const {
  if (outcome == "ok") return ok_.Value();
  if (outcome == "skipped") return skipped_.Value();
  if (outcome == "retry") return retry_.Value();
  if (outcome == "dead_letter") return dead_.Value();
  return 0;
}

}  // namespace h3pipe::metrics
