#pragma once
// GPU metrics for a service's own devices: utilization, memory and power per GPU read from NVML
// (loaded at run time, see nvml.h) by a polling thread, exported into the service's registry.
// The series mirror what NVIDIA's DCGM exporter publishes (each help text names the DCGM field),
// so a cluster that already runs dcgm-exporter can compare the two.
//
//   h3pipe_gpu_available                      1 = NVML loaded and every configured GPU answered
//                                             at the last poll; 0 otherwise
//   h3pipe_gpu_device_up{gpu}                 per configured GPU: 1 answered, 0 missing or lost
//   h3pipe_gpu_utilization_ratio{gpu,model,uuid}
//   h3pipe_gpu_memory_utilization_ratio{...}
//   h3pipe_gpu_memory_used_bytes{...} / h3pipe_gpu_memory_total_bytes{...}
//   h3pipe_gpu_power_watts{...} / h3pipe_gpu_power_limit_watts{...}
//   h3pipe_gpu_temperature_celsius{...}
//
// No driver or no libnvidia-ml: the registry holds `h3pipe_gpu_available 0` and nothing else,
// no thread runs, and nothing crashes (docs/design.md rule 5).  `gpu` is the id as written in the
// cluster config (the host's physical index), translated to the container's NVML view through
// nvml_indices().  The host label comes from the scrape target (configs/prometheus).
//
// Threading: start() samples once before it returns (series are present at once), then a thread
// polls every `period`; the destructor stops and joins it.  The registry must outlive the monitor.
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu/nvml.h"

namespace h3pipe::gpu {

struct MonitorOptions {
  std::string library = kNvmlLibrary;
  // The NVIDIA_VISIBLE_DEVICES value to translate config ids with; nullopt = read the process
  // environment.
  std::optional<std::string> nvidia_visible_devices;
};

class GpuMonitor final {
 public:
  // device_ids: config ids of the GPUs this service owns; empty = every device NVML sees.
  static std::unique_ptr<GpuMonitor> start(prometheus::Registry& registry,
                                           std::vector<int> device_ids,
                                           std::chrono::milliseconds period);
  static std::unique_ptr<GpuMonitor> start(prometheus::Registry& registry,
                                           std::vector<int> device_ids,
                                           std::chrono::milliseconds period,
                                           MonitorOptions options);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // The value of h3pipe_gpu_available at the last poll.
  bool available() const { return available_.load(); }
  bool nvml_loaded() const { return nvml_ != nullptr; }
  // Runs one poll now (tests, and preflight's one-shot use); thread-safe against the poller.
  void poll_once();
  // The devices that answered at the last poll, together (the pool's heartbeat, GET /v1/fleet):
  // nullopt when none did (no NVML, no device, a CPU pool).
  struct Use {
    unsigned devices = 0;
    double utilization = 0;  // mean of their utilization ratios, 0..1
    double memory_used_bytes = 0, memory_total_bytes = 0;
  };
  std::optional<Use> use();

  struct Device;  // per-GPU series (gpu_monitor.cpp)

 private:
  GpuMonitor(prometheus::Registry& registry, std::vector<int> ids,
             std::chrono::milliseconds period);
  void register_families();
  void loop();

  prometheus::Registry& registry_;
  std::vector<int> config_ids_;  // labels
  std::vector<int> nvml_ids_;    // NVML indices (-1 = not exposed here)
  std::chrono::milliseconds period_;
  std::unique_ptr<Nvml> nvml_;
  prometheus::Gauge* available_gauge_ = nullptr;
  std::vector<std::unique_ptr<Device>> devices_;
  struct Families;
  std::unique_ptr<Families> families_;
  std::atomic<bool> available_{false};
  std::optional<Use> use_;  // under mu_
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace h3pipe::gpu
