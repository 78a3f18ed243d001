#include "common/gpu/gpu_monitor.h"

#include <prometheus/gauge.h>

#include <cstdlib>
#include <map>

namespace h3pipe::gpu {

using prometheus::Family;
using prometheus::Gauge;

struct GpuMonitor::Families {
  Family<Gauge>* up = nullptr;
  Family<Gauge>* util = nullptr;
  Family<Gauge>* mem_util = nullptr;
  Family<Gauge>* mem_used = nullptr;
  Family<Gauge>* mem_total = nullptr;
  Family<Gauge>* power = nullptr;
  Family<Gauge>* power_limit = nullptr;
  Family<Gauge>* temperature = nullptr;
};

// The series of one configured GPU.  Value series are added on the first successful sample and
// removed when the device stops answering, so a lost GPU shows as device_up 0 with no stale
// utilization left behind.
struct GpuMonitor::Device {
  int config_id = 0;
  int nvml_index = -1;
  Gauge* up = nullptr;
  struct Series {
    Family<Gauge>* family;
    Gauge* gauge;
  };
  std::vector<Series> series;

  void drop() {
    for (auto& s : series) s.family->Remove(s.gauge);
    series.clear();
  }
  void set(Family<Gauge>* f, const std::map<std::string, std::string>& labels,
           const std::optional<double>& v) {
    if (!v) return;
    for (auto& s : series)
      if (s.family == f) {
        s.gauge->Set(*v);
        return;
      }
    Gauge& g = f->Add(labels);
    g.Set(*v);
    series.push_back({f, &g});
  }
};

std::unique_ptr<GpuMonitor> GpuMonitor::start(prometheus::Registry& registry,
                                              std::vector<int> device_ids,
                                              std::chrono::milliseconds period) {
  return start(registry, std::move(device_ids), period, MonitorOptions{});
}

std::unique_ptr<GpuMonitor> GpuMonitor::start(prometheus::Registry& registry,
                                              std::vector<int> device_ids,
                                              std::chrono::milliseconds period,
                                              MonitorOptions options) {
  std::unique_ptr<GpuMonitor> m(new GpuMonitor(registry, std::move(device_ids), period));
  m->available_gauge_ =
      &prometheus::BuildGauge()
           .Name("h3pipe_gpu_available")
           .Help(
               "1 when NVML answered for every GPU this service owns at the last poll; 0 with no "
               "NVIDIA driver, no GPU, or a configured GPU missing or lost (DCGM exporter: the "
               "DCGM_FI_DEV_* series of the GPU disappear)")
           .Register(registry)
           .Add({});
  m->available_gauge_->Set(0);
  auto nvml = Nvml::load(options.library);
  if (!nvml.ok()) return m;  // no driver: h3pipe_gpu_available 0 and nothing else
  m->nvml_ = std::move(nvml.value());

  if (m->config_ids_.empty()) {
    auto n = m->nvml_->device_count();
    for (int i = 0; n.ok() && i < *n; ++i) m->config_ids_.push_back(i);
    m->nvml_ids_ = m->config_ids_;
  } else {
    std::string env;
    if (options.nvidia_visible_devices) {
      env = *options.nvidia_visible_devices;
    } else if (const char* e = std::getenv("NVIDIA_VISIBLE_DEVICES")) {
      env = e;
    }
    m->nvml_ids_ = nvml_indices(m->config_ids_, env.c_str());
  }
  m->register_families();
  m->poll_once();
  m->thread_ = std::thread([p = m.get()] { p->loop(); });
  return m;
}

GpuMonitor::GpuMonitor(prometheus::Registry& registry, std::vector<int> ids,
                       std::chrono::milliseconds period)
    : registry_(registry), config_ids_(std::move(ids)), period_(period) {}

GpuMonitor::~GpuMonitor() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuMonitor::register_families() {
  families_ = std::make_unique<Families>();
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(registry_);
  };
  families_->up =
      gauge("h3pipe_gpu_device_up",
            "1 while the configured GPU answers NVML queries, 0 when it is not visible or "
            "lost (DCGM exporter: presence of DCGM_FI_DEV_* series for the GPU)");
  families_->util = gauge("h3pipe_gpu_utilization_ratio",
                          "Fraction of the last sample period a kernel ran on the GPU, 0..1 (DCGM "
                          "exporter: DCGM_FI_DEV_GPU_UTIL, in percent)");
  families_->mem_util =
      gauge("h3pipe_gpu_memory_utilization_ratio",
            "Fraction of the last sample period device memory was read or "
            "written, 0..1 (DCGM exporter: DCGM_FI_DEV_MEM_COPY_UTIL, in percent)");
  families_->mem_used = gauge("h3pipe_gpu_memory_used_bytes",
                              "Device memory in use (DCGM exporter: DCGM_FI_DEV_FB_USED, in MiB)");
  families_->mem_total = gauge("h3pipe_gpu_memory_total_bytes",
                               "Device memory in total (DCGM exporter: DCGM_FI_DEV_FB_FREE + "
                               "DCGM_FI_DEV_FB_USED, in MiB)");
  families_->power = gauge("h3pipe_gpu_power_watts",
                           "Board power draw (DCGM exporter: DCGM_FI_DEV_POWER_USAGE, watts)");
  families_->power_limit = gauge("h3pipe_gpu_power_limit_watts",
                                 "Enforced power limit, as set by nvidia-smi -pl (DCGM exporter: "
                                 "DCGM_FI_DEV_ENFORCED_POWER_LIMIT, watts)");
  families_->temperature = gauge("h3pipe_gpu_temperature_celsius",
                                 "GPU core temperature (DCGM exporter: DCGM_FI_DEV_GPU_TEMP)");
  for (std::size_t i = 0; i < config_ids_.size(); ++i) {
    auto d = std::make_unique<Device>();
    d->config_id = config_ids_[i];
    d->nvml_index = nvml_ids_[i];
    d->up = &families_->up->Add({{"gpu", std::to_string(d->config_id)}});
    devices_.push_back(std::move(d));
  }
}

void GpuMonitor::poll_once() {
  if (!nvml_) return;
  std::lock_guard<std::mutex> lk(mu_);
  bool all = !devices_.empty();
  Use use;
  for (auto& d : devices_) {
    auto s = nvml_->sample(d->nvml_index);
    if (!s.ok()) {
      d->up->Set(0);
      d->drop();
      all = false;
      continue;
    }
    d->up->Set(1);
    ++use.devices;
    use.utilization += s->utilization_ratio.value_or(0);
    use.memory_used_bytes += s->memory_used_bytes.value_or(0);
    use.memory_total_bytes += s->memory_total_bytes.value_or(0);
    std::map<std::string, std::string> labels = {
        {"gpu", std::to_string(d->config_id)}, {"model", s->name}, {"uuid", s->uuid}};
    d->set(families_->util, labels, s->utilization_ratio);
    d->set(families_->mem_util, labels, s->memory_util_ratio);
    d->set(families_->mem_used, labels, s->memory_used_bytes);
    d->set(families_->mem_total, labels, s->memory_total_bytes);
    d->set(families_->power, labels, s->power_watts);
    d->set(families_->power_limit, labels, s->power_limit_watts);
    d->set(families_->temperature, labels, s->temperature_celsius);
  }
  available_gauge_->Set(all ? 1 : 0);
  available_ = all;
  if (use.devices) use.utilization /= use.devices;
  use_ = use.devices ? std::optional<Use>(use) : std::nullopt;
}

std::optional<GpuMonitor::Use> GpuMonitor::use() {
  std::lock_guard<std::mutex> lk(mu_);
  return use_;
}

void GpuMonitor::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (cv_.wait_for(lk, period_, [this] { return stop_; })) break;
    lk.unlock();
    poll_once();
    lk.lock();
  }
}

}  // namespace h3pipe::gpu
