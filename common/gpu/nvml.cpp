#include "common/gpu/nvml.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <sstream>

namespace h3pipe::gpu {
namespace {

// The subset of nvml.h we use, declared here so the build needs no CUDA headers.  These layouts
// and values are part of NVML's stable C ABI.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlTemperatureGpu = 0;

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  // Optional entry points: a missing one only drops its series.
  nvmlReturn_t (*driver_version)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;

  std::string why(nvmlReturn_t r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return s ? std::string(s) : "NVML error " + std::to_string(r);
  }
};

namespace {

template <typename F>
void resolve(void* h, const char* name, F& out) {
  out = reinterpret_cast<F>(::dlsym(h, name));
}

}  // namespace

Result<std::unique_ptr<Nvml>> Nvml::load(const std::string& library) {
  void* h = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    return make_error(errc::gpu::kNvmlAbsent, "no NVIDIA driver here ({})",
                      e ? e : library + ": dlopen failed");
  }
  auto api = std::make_unique<Api>();
  resolve(h, "nvmlInit_v2", api->init);
  resolve(h, "nvmlShutdown", api->shutdown);
  resolve(h, "nvmlErrorString", api->error_string);
  resolve(h, "nvmlDeviceGetCount_v2", api->count);
  resolve(h, "nvmlDeviceGetHandleByIndex_v2", api->handle_by_index);
  if (!api->init || !api->shutdown || !api->count || !api->handle_by_index) {
    ::dlclose(h);
    return make_error(errc::gpu::kNvmlAbsent, "{} lacks the NVML v2 entry points (driver too old?)",
                      library);
  }
  resolve(h, "nvmlSystemGetDriverVersion", api->driver_version);
  resolve(h, "nvmlDeviceGetName", api->name);
  resolve(h, "nvmlDeviceGetUUID", api->uuid);
  resolve(h, "nvmlDeviceGetUtilizationRates", api->utilization);
  resolve(h, "nvmlDeviceGetMemoryInfo", api->memory);
  resolve(h, "nvmlDeviceGetPowerUsage", api->power);
  resolve(h, "nvmlDeviceGetEnforcedPowerLimit", api->power_limit);
  resolve(h, "nvmlDeviceGetTemperature", api->temperature);
  if (nvmlReturn_t r = api->init(); r != kNvmlSuccess) {
    std::string why = api->why(r);
    ::dlclose(h);
    return make_error(errc::gpu::kNvmlInit,
                      "nvmlInit failed: {} (driver not loaded, or no device node)", why);
  }
  auto n = std::unique_ptr<Nvml>(new Nvml());
  n->handle_ = h;
  n->api_ = std::move(api);
  return n;
}

Nvml::~Nvml() {
  if (api_ && api_->shutdown) api_->shutdown();
  if (handle_) ::dlclose(handle_);
}

std::string Nvml::driver_version() const {
  char buf[96] = {};
  if (api_->driver_version && api_->driver_version(buf, sizeof buf) == kNvmlSuccess) return buf;
  return {};
}

Result<int> Nvml::device_count() const {
  unsigned int n = 0;
  if (nvmlReturn_t r = api_->count(&n); r != kNvmlSuccess)
    return make_error(errc::gpu::kCount, "nvmlDeviceGetCount failed: {}", api_->why(r));
  return static_cast<int>(n);
}

Result<DeviceSample> Nvml::sample(int index) const {
  if (index < 0)
    return make_error(errc::gpu::kDevice, "GPU {} is not visible to this process", index);
  nvmlDevice_t d = nullptr;
  if (nvmlReturn_t r = api_->handle_by_index(static_cast<unsigned>(index), &d); r != kNvmlSuccess)
    return make_error(errc::gpu::kDevice, "GPU {}: {}", index, api_->why(r));
  DeviceSample s;
  s.index = index;
  char buf[96] = {};
  if (api_->name && api_->name(d, buf, sizeof buf) == kNvmlSuccess) s.name = buf;
  buf[0] = 0;
  if (api_->uuid && api_->uuid(d, buf, sizeof buf) == kNvmlSuccess) s.uuid = buf;
  if (nvmlUtilization_t u{}; api_->utilization && api_->utilization(d, &u) == kNvmlSuccess) {
    s.utilization_ratio = u.gpu / 100.0;
    s.memory_util_ratio = u.memory / 100.0;
  }
  if (nvmlMemory_t m{}; api_->memory) {
    // A lost GPU answers every query with an error: report it as gone rather than as zeros.
    nvmlReturn_t r = api_->memory(d, &m);
    if (r != kNvmlSuccess && r != 3 /* NVML_ERROR_NOT_SUPPORTED */)
      return make_error(errc::gpu::kDevice, "GPU {}: {}", index, api_->why(r));
    if (r == kNvmlSuccess) {
      s.memory_used_bytes = static_cast<double>(m.used);
      s.memory_total_bytes = static_cast<double>(m.total);
    }
  }
  unsigned int v = 0;
  if (api_->power && api_->power(d, &v) == kNvmlSuccess) s.power_watts = v / 1000.0;
  if (api_->power_limit && api_->power_limit(d, &v) == kNvmlSuccess)
    s.power_limit_watts = v / 1000.0;
  if (api_->temperature && api_->temperature(d, kNvmlTemperatureGpu, &v) == kNvmlSuccess)
    s.temperature_celsius = v;
  return s;
}

std::vector<int> nvml_indices(const std::vector<int>& config_ids,
                              const char* nvidia_visible_devices) {
  std::string v = nvidia_visible_devices ? nvidia_visible_devices : "";
  std::vector<int> exposed;
  bool numeric = !v.empty();
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) {
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front())))
      item.erase(0, 1);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos) {
      numeric = false;
      break;
    }
    exposed.push_back(std::atoi(item.c_str()));
  }
  if (!numeric) return config_ids;
  std::vector<int> out;
  out.reserve(config_ids.size());
  for (int id : config_ids) {
    int idx = -1;
    for (std::size_t i = 0; i < exposed.size(); ++i)
      if (exposed[i] == id) idx = static_cast<int>(i);
    out.push_back(idx);
  }
  return out;
}

Inventory probe_inventory(const std::string& library) {
  Inventory inv;
  auto n = Nvml::load(library);
  if (!n.ok()) {
    inv.error = n.error().message;
    return inv;
  }
  inv.nvml = true;
  inv.driver = (*n)->driver_version();
  auto c = (*n)->device_count();
  if (!c.ok()) {
    inv.error = c.error().message;
    return inv;
  }
  inv.count = *c;
  for (int i = 0; i < inv.count; ++i) {
    auto s = (*n)->sample(i);
    inv.names.push_back(s.ok() ? s->name : std::string("(lost: ") + s.error().message + ")");
  }
  return inv;
}

}  // namespace h3pipe::gpu
