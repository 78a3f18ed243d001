// A stand-in for libnvidia-ml.so.1, for tests on machines without a GPU: the same C entry points
// GpuMonitor resolves, answering from the environment so a test can script a machine.
//   FAKE_NVML_DEVICES=N     devices 0..N-1 (default 2)
//   FAKE_NVML_LOST=1,3      these indices answer NVML_ERROR_GPU_IS_LOST
//   FAKE_NVML_INIT_FAIL=1   nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED
//   FAKE_NVML_UTIL=P        utilization percent of every device (default 40 + index)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
struct Dev {
  int index;
};
Dev g_devs[64];
constexpr int kSuccess = 0, kInvalidArgument = 2, kDriverNotLoaded = 9, kGpuIsLost = 15;

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}
int count() {
  return env_int("FAKE_NVML_DEVICES", 2);
}
bool lost(int i) {
  const char* v = std::getenv("FAKE_NVML_LOST");
  if (!v) return false;
  std::string s = std::string(",") + v + ",";
  return s.find("," + std::to_string(i) + ",") != std::string::npos;
}
int check(const Dev* d) {
  if (!d) return kInvalidArgument;
  return lost(d->index) ? kGpuIsLost : kSuccess;
}
}  // namespace

extern "C" {
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};

int nvmlInit_v2() {
  return env_int("FAKE_NVML_INIT_FAIL", 0) ? kDriverNotLoaded : kSuccess;
}
int nvmlShutdown() {
  return kSuccess;
}
const char* nvmlErrorString(int r) {
  switch (r) {
    case kDriverNotLoaded:
      return "Driver Not Loaded";
    case kGpuIsLost:
      return "GPU is lost";
    case kInvalidArgument:
      return "Invalid Argument";
    default:
      return "Unknown Error";
  }
}
int nvmlSystemGetDriverVersion(char* buf, unsigned int n) {
  std::snprintf(buf, n, "550.00-fake");
  return kSuccess;
}
int nvmlDeviceGetCount_v2(unsigned int* n) {
  *n = static_cast<unsigned>(count());
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** out) {
  if (static_cast<int>(i) >= count() || i >= 64) return kInvalidArgument;
  g_devs[i].index = static_cast<int>(i);
  *out = &g_devs[i];
  return kSuccess;
}
int nvmlDeviceGetName(void* d, char* buf, unsigned int n) {
  std::snprintf(buf, n, "Tesla T10");
  return check(static_cast<Dev*>(d));
}
int nvmlDeviceGetUUID(void* d, char* buf, unsigned int n) {
  std::snprintf(buf, n, "GPU-fake-%d", static_cast<Dev*>(d)->index);
  return check(static_cast<Dev*>(d));
}
int nvmlDeviceGetUtilizationRates(void* d, nvmlUtilization_t* u) {
  auto* dev = static_cast<Dev*>(d);
  u->gpu = static_cast<unsigned>(env_int("FAKE_NVML_UTIL", 40 + dev->index));
  u->memory = 10;
  return check(dev);
}
int nvmlDeviceGetMemoryInfo(void* d, nvmlMemory_t* m) {
  auto* dev = static_cast<Dev*>(d);
  m->total = 16ull << 30;
  m->used = static_cast<unsigned long long>(dev->index + 1) << 30;
  m->free = m->total - m->used;
  return check(dev);
}
int nvmlDeviceGetPowerUsage(void* d, unsigned int* mw) {
  *mw = 70500;
  return check(static_cast<Dev*>(d));
}
int nvmlDeviceGetEnforcedPowerLimit(void* d, unsigned int* mw) {
  *mw = 70000;
  return check(static_cast<Dev*>(d));
}
int nvmlDeviceGetTemperature(void* d, int, unsigned int* t) {
  *t = 55;
  return check(static_cast<Dev*>(d));
}
}
