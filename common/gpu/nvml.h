#pragma once
// NVML loaded at run time with dlopen (docs/design.md rule 5): the binaries link no NVIDIA library,
// so the same build runs on a laptop without a driver, in a CPU-only container, and on a GPU node
// where the NVIDIA container toolkit injects libnvidia-ml.so.1 (driver capability "utility").
//
// Threading: an Nvml object may be used from one thread at a time (the GpuMonitor's poller, or
// preflight).  NVML itself is thread-safe; the object only guards its own handle table.
// Errors: absent library, missing symbol or a failed nvmlInit all make load() return an Error
// with code "gpu.nvml_absent" / "gpu.nvml_init"; nothing here throws or aborts.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::gpu {

// The soname the driver installs (and the container toolkit mounts); never the unversioned
// libnvidia-ml.so, which only the CUDA toolkit's stubs provide.
inline constexpr const char kNvmlLibrary[] = "libnvidia-ml.so.1";

// One poll of one device.  Fields NVML cannot read on this device (power on some boards) stay
// nullopt and their series are not exported.
struct DeviceSample {
  int index = 0;                            // NVML index (inside this process's view)
  std::string name;                         // "Tesla T10"
  std::string uuid;                         // "GPU-..."
  std::optional<double> utilization_ratio;  // 0..1, SM busy fraction over the driver's window
  std::optional<double> memory_util_ratio;  // 0..1, memory controller busy fraction
  std::optional<double> memory_used_bytes;
  std::optional<double> memory_total_bytes;
  std::optional<double> power_watts;
  std::optional<double> power_limit_watts;
  std::optional<double> temperature_celsius;
};

class Nvml final {
 public:
  // Loads `library` (a soname or a path), resolves the symbols and calls nvmlInit_v2.
  static Result<std::unique_ptr<Nvml>> load(const std::string& library = kNvmlLibrary);
  ~Nvml();  // nvmlShutdown + dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  std::string driver_version() const;
  Result<int> device_count() const;
  // Error "gpu.device" when the index does not exist or the device is lost (Xid 79 etc.).
  Result<DeviceSample> sample(int index) const;

  struct Api;  // resolved entry points (nvml.cpp)

 private:
  Nvml() = default;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
};

// Maps device ids as written in the cluster config (host-physical indices, the seeds'
// CUDA_VISIBLE_DEVICES) to indices in this process's NVML view.  Inside a container started with
// a GPU reservation, the NVIDIA runtime sets NVIDIA_VISIBLE_DEVICES to the host indices it
// exposed ("2,3") and NVML enumerates only those, renumbered 0..n-1; so host id 3 is index 1.
// When the variable is unset, empty, "all", "none", "void" or holds UUIDs (Kubernetes device
// plugin), ids are used as they are.  An id not exposed to the container maps to -1.
std::vector<int> nvml_indices(const std::vector<int>& config_ids,
                              const char* nvidia_visible_devices);

// What preflight needs: is NVML there, how many devices it sees, their names.
struct Inventory {
  bool nvml = false;
  std::string error;   // why NVML is unavailable (when !nvml)
  std::string driver;  // driver version
  int count = 0;
  std::vector<std::string> names;
};
Inventory probe_inventory(const std::string& library = kNvmlLibrary);

}  // namespace h3pipe::gpu
