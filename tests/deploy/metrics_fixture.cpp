// A stand-in for a deployment's scrape targets, for tests/deploy/deploy_prometheus_e2e.py: every
// metric family the services export (WorkerProbe per stage, the GPU monitor over the fake NVML, the
// transfer probe, the dead-letter gauge the CLI exports), on one free port, with activity so
// that rates and quantiles have data.  Prints "PORT <n>" once serving; runs until SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "common/api/api_metrics.h"
#include "common/gpu/gpu_monitor.h"
#include "common/metrics/metrics.h"
#ifdef H3PIPE_HAVE_TRANSFER_PROBE
#include "common/transfer/probe.h"
#endif

namespace {
std::atomic<bool> g_stop{false};
void on_term(int) {
  g_stop = true;
}
}  // namespace

int main(int argc, char** argv) {
  std::string nvml = h3pipe::gpu::kNvmlLibrary;
  std::string host = "fixture";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--nvml")) nvml = argv[i + 1];
    if (!std::strcmp(argv[i], "--host")) host = argv[i + 1];
  }
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  auto reg = std::make_shared<prometheus::Registry>();
  h3pipe::metrics::WorkerProbe enc(*reg, "encode", "t10x4-encode", host);
  h3pipe::metrics::WorkerProbe sam(*reg, "sample", "t10x4-sample", host);
  h3pipe::metrics::WorkerProbe dec(*reg, "decode", "3080ti-decode", host);
  h3pipe::gpu::MonitorOptions mo;
  mo.library = nvml;
  mo.nvidia_visible_devices = "";
  auto gpus =
      h3pipe::gpu::GpuMonitor::start(*reg, {0, 1, 2, 3}, std::chrono::milliseconds(500), mo);
  auto& dead = prometheus::BuildGauge()
                   .Name("h3pipe_dead_letters")
                   .Help("Entries in the dead-letter stream h3pipe:dead (XLEN)")
                   .Register(*reg)
                   .Add({});
#ifdef H3PIPE_HAVE_TRANSFER_PROBE
  h3pipe::transfer::TransferProbe tx(*reg, "sender");
  h3pipe::transfer::TransferProbe rx(*reg, "receiver");
#endif
  h3pipe::api::ApiMetrics api(reg);  // h3pipe-api's (docs/api.md, "Metrics")
  auto sse = api.sse_client();
  auto server = h3pipe::metrics::MetricsServer::start("127.0.0.1", 0, reg);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.error().message.c_str());
    return 1;
  }
  std::printf("PORT %d\n", (*server)->port());
  std::fflush(stdout);
  for (long i = 0; !g_stop; ++i) {
    enc.task_done(0.4 + (i % 3) * 0.1, 0.05);
    api.request("GET", "/v1/videos/video_r-1", 200, 0.001 + (i % 4) * 0.0005);
    api.request("POST", "/v1/videos", i % 10 ? 200 : 400, 0.003);
    api.request("GET", "/v1/videos/video_r-1/content", i % 7 ? 206 : 503, 0.02);
    api.webhook_delivery(i % 5 ? "delivered" : "retried");
    sam.task_done(2.0 + (i % 5) * 0.3, 1.5);
    dec.task_done(1.2, 0.2);
    sam.add_bubble(0.05);
    // Duty cycle, idle causes, MFU, end to end and real-time factor (issue #24).
    sam.task_ran(2.0);
    for (const char* cause : h3pipe::metrics::WorkerProbe::kIdleCauses) sam.idle(0.01, cause);
    sam.set_mfu(0.31);
    dec.job_done(150 + i % 5, 30 + i % 5);
    dec.add_bubble(0.02);
    sam.set_busy(i % 2);
    sam.set_queue_depth(3 + i % 4);
    dec.set_queue_depth(i % 2);
    enc.set_queue_depth(0);
    sam.add_bytes(4.3e6);
    if (i % 20 == 0) dec.task_retry();
    dead.Set(1);
#ifdef H3PIPE_HAVE_TRANSFER_PROBE
    tx.add_bytes(4.3e6);
    rx.add_bytes(4.3e6);
    tx.transfer_done(1.1);
    rx.transfer_done(1.0);
    tx.set_waiting(i % 3);
    tx.set_in_flight(1);
    if (i % 25 == 0) rx.integrity_failure();
    if (i % 25 == 0) tx.retry();
#endif
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}
