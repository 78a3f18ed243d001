// GpuMonitor and the NVML loader: without NVML (a library name that does not exist, and the real
// soname on machines that lack a driver) and against tests/gpu/fake_nvml.cpp, a stand-in
// libnvidia-ml that the test scripts through the environment.
#include "common/gpu/gpu_monitor.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <cstdlib>

namespace h3pipe::gpu {
namespace {

using namespace std::chrono_literals;

std::string text(prometheus::Registry& reg) {
  return prometheus::TextSerializer().Serialize(reg.Collect());
}

// Every sample line (no comments) of the exposition text.
std::vector<std::string> samples(prometheus::Registry& reg) {
  std::vector<std::string> out;
  std::string t = text(reg);
  std::size_t pos = 0;
  while (pos < t.size()) {
    std::size_t nl = t.find('\n', pos);
    std::string line = t.substr(pos, nl - pos);
    if (!line.empty() && line[0] != '#') out.push_back(line);
    pos = nl == std::string::npos ? t.size() : nl + 1;
  }
  return out;
}

bool has(const std::vector<std::string>& lines, const std::string& l) {
  for (const auto& x : lines)
    if (x == l) return true;
  return false;
}

class FakeNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("FAKE_NVML_LOST");
    ::unsetenv("FAKE_NVML_INIT_FAIL");
    ::unsetenv("FAKE_NVML_UTIL");
    ::setenv("FAKE_NVML_DEVICES", "2", 1);
  }
  MonitorOptions opts(const char* visible = "") {
    MonitorOptions o;
    o.library = H3PIPE_FAKE_NVML;
    o.nvidia_visible_devices = visible;
    return o;
  }
  prometheus::Registry reg_;
};

TEST(GpuMonitorAbsent, ExportsOnlyAvailableZero) {
  prometheus::Registry reg;
  MonitorOptions o;
  o.library = "libnvidia-ml-h3pipe-absent.so.1";
  auto m = GpuMonitor::start(reg, {0, 1}, 10ms, o);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->available());
  EXPECT_FALSE(m->nvml_loaded());
  std::string t = text(reg);
  EXPECT_EQ(samples(reg), std::vector<std::string>{"h3pipe_gpu_available 0"}) << t;
  EXPECT_NE(t.find("# TYPE h3pipe_gpu_available gauge"), std::string::npos);
  EXPECT_EQ(t.find("h3pipe_gpu_utilization"), std::string::npos);
}

TEST(GpuMonitorAbsent, DefaultSonameOnAMachineWithoutDriver) {
  if (void* h = ::dlopen(kNvmlLibrary, RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(h);
    GTEST_SKIP() << "this machine has libnvidia-ml.so.1";
  }
  prometheus::Registry reg;
  auto m = GpuMonitor::start(reg, {0}, 10ms);
  EXPECT_EQ(samples(reg), std::vector<std::string>{"h3pipe_gpu_available 0"});
  auto inv = probe_inventory();
  EXPECT_FALSE(inv.nvml);
  EXPECT_NE(inv.error.find("libnvidia-ml.so.1"), std::string::npos) << inv.error;
}

TEST_F(FakeNvml, InitFailureIsAbsence) {
  ::setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  auto m = GpuMonitor::start(reg_, {0}, 1h, opts());
  EXPECT_FALSE(m->nvml_loaded());
  EXPECT_EQ(samples(reg_), std::vector<std::string>{"h3pipe_gpu_available 0"});
  auto inv = probe_inventory(H3PIPE_FAKE_NVML);
  EXPECT_FALSE(inv.nvml);
  EXPECT_NE(inv.error.find("Driver Not Loaded"), std::string::npos) << inv.error;
}

TEST_F(FakeNvml, ExportsEachConfiguredGpu) {
  auto m = GpuMonitor::start(reg_, {0, 1}, 1h, opts());
  ASSERT_TRUE(m->available());
  auto s = samples(reg_);
  EXPECT_TRUE(has(s, "h3pipe_gpu_available 1"));
  EXPECT_TRUE(has(s, "h3pipe_gpu_device_up{gpu=\"0\"} 1"));
  EXPECT_TRUE(has(
      s, "h3pipe_gpu_utilization_ratio{gpu=\"1\",model=\"Tesla T10\",uuid=\"GPU-fake-1\"} 0.41"))
      << text(reg_);
  EXPECT_TRUE(has(s,
                  "h3pipe_gpu_memory_used_bytes{gpu=\"1\",model=\"Tesla T10\",uuid=\"GPU-fake-1\"} "
                  "2147483648"));
  EXPECT_TRUE(has(s,
                  "h3pipe_gpu_memory_total_bytes{gpu=\"0\",model=\"Tesla "
                  "T10\",uuid=\"GPU-fake-0\"} 17179869184"));
  EXPECT_TRUE(
      has(s, "h3pipe_gpu_power_watts{gpu=\"0\",model=\"Tesla T10\",uuid=\"GPU-fake-0\"} 70.5"));
  EXPECT_TRUE(
      has(s, "h3pipe_gpu_power_limit_watts{gpu=\"0\",model=\"Tesla T10\",uuid=\"GPU-fake-0\"} 70"));
  EXPECT_TRUE(has(
      s, "h3pipe_gpu_temperature_celsius{gpu=\"0\",model=\"Tesla T10\",uuid=\"GPU-fake-0\"} 55"));
  // Every help text names its DCGM exporter field.
  std::string t = text(reg_);
  for (const char* f : {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"})
    EXPECT_NE(t.find(f), std::string::npos) << f;
}

TEST_F(FakeNvml, EmptyListMeansEveryDevice) {
  ::setenv("FAKE_NVML_DEVICES", "3", 1);
  auto m = GpuMonitor::start(reg_, {}, 1h, opts());
  auto s = samples(reg_);
  EXPECT_TRUE(has(s, "h3pipe_gpu_device_up{gpu=\"2\"} 1"));
  EXPECT_TRUE(m->available());
}

TEST_F(FakeNvml, ContainerViewTranslatesHostIds) {
  // The container was given host GPUs 2 and 3: NVML sees them as 0 and 1.
  auto m = GpuMonitor::start(reg_, {3}, 1h, opts("2,3"));
  auto s = samples(reg_);
  EXPECT_TRUE(has(s, "h3pipe_gpu_device_up{gpu=\"3\"} 1")) << text(reg_);
  EXPECT_TRUE(has(
      s, "h3pipe_gpu_utilization_ratio{gpu=\"3\",model=\"Tesla T10\",uuid=\"GPU-fake-1\"} 0.41"));
}

TEST_F(FakeNvml, MissingGpuMakesUnavailable) {
  auto m = GpuMonitor::start(reg_, {0, 5}, 1h, opts());
  EXPECT_FALSE(m->available());
  auto s = samples(reg_);
  EXPECT_TRUE(has(s, "h3pipe_gpu_available 0"));
  EXPECT_TRUE(has(s, "h3pipe_gpu_device_up{gpu=\"5\"} 0"));
  EXPECT_TRUE(has(s, "h3pipe_gpu_device_up{gpu=\"0\"} 1"));
}

TEST_F(FakeNvml, LostGpuDropsItsSeriesAndComesBack) {
  auto m = GpuMonitor::start(reg_, {0, 1}, 1h, opts());
  ASSERT_TRUE(m->available());
  ::setenv("FAKE_NVML_LOST", "1", 1);
  m->poll_once();
  EXPECT_FALSE(m->available());
  std::string t = text(reg_);
  EXPECT_EQ(t.find("GPU-fake-1"), std::string::npos) << t;
  EXPECT_TRUE(has(samples(reg_), "h3pipe_gpu_device_up{gpu=\"1\"} 0"));
  ::unsetenv("FAKE_NVML_LOST");
  m->poll_once();
  EXPECT_TRUE(m->available());
  EXPECT_NE(text(reg_).find("GPU-fake-1"), std::string::npos);
}

// What the pool's heartbeat carries (GET /v1/fleet, #38 item 4): the answering devices together.
TEST_F(FakeNvml, UseSumsTheAnsweringDevices) {
  auto m = GpuMonitor::start(reg_, {0, 1}, 1h, opts());
  auto u = m->use();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->devices, 2u);
  EXPECT_NEAR(u->utilization, (0.40 + 0.41) / 2, 1e-9);
  EXPECT_DOUBLE_EQ(u->memory_used_bytes, static_cast<double>(3ull << 30));  // 1 + 2 GiB
  EXPECT_DOUBLE_EQ(u->memory_total_bytes, static_cast<double>(32ull << 30));
  ::setenv("FAKE_NVML_LOST", "1", 1);
  m->poll_once();
  ASSERT_TRUE(m->use().has_value());
  EXPECT_EQ(m->use()->devices, 1u);
  ::setenv("FAKE_NVML_LOST", "0,1", 1);
  m->poll_once();
  EXPECT_FALSE(m->use().has_value());
  ::unsetenv("FAKE_NVML_LOST");
}

TEST_F(FakeNvml, NoDriverNoUse) {
  ::setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  auto m = GpuMonitor::start(reg_, {0}, 1h, opts());
  EXPECT_FALSE(m->use().has_value());
}

TEST_F(FakeNvml, PollerThreadUpdatesValues) {
  ::setenv("FAKE_NVML_UTIL", "10", 1);
  auto m = GpuMonitor::start(reg_, {0}, 5ms, opts());
  auto want = "h3pipe_gpu_utilization_ratio{gpu=\"0\",model=\"Tesla T10\",uuid=\"GPU-fake-0\"} 0.1";
  EXPECT_TRUE(has(samples(reg_), want));
  // The poller keeps running; destruction joins it promptly.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline && !m->available()) std::this_thread::yield();
  m.reset();
}

TEST(NvmlIndices, TranslatesNumericVisibleDevices) {
  EXPECT_EQ(nvml_indices({0, 1, 2, 3}, nullptr), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(nvml_indices({0, 1}, ""), (std::vector<int>{0, 1}));
  EXPECT_EQ(nvml_indices({0, 1}, "all"), (std::vector<int>{0, 1}));
  EXPECT_EQ(nvml_indices({2, 3}, "2,3"), (std::vector<int>{0, 1}));
  EXPECT_EQ(nvml_indices({3, 2}, " 2, 3 "), (std::vector<int>{1, 0}));
  EXPECT_EQ(nvml_indices({0, 4}, "2,3"), (std::vector<int>{-1, -1}));
  EXPECT_EQ(nvml_indices({0}, "GPU-8a1b,GPU-77ef"), (std::vector<int>{0}));
}

TEST_F(FakeNvml, InventoryForPreflight) {
  ::setenv("FAKE_NVML_DEVICES", "4", 1);
  auto inv = probe_inventory(H3PIPE_FAKE_NVML);
  EXPECT_TRUE(inv.nvml);
  EXPECT_EQ(inv.count, 4);
  EXPECT_EQ(inv.driver, "550.00-fake");
  ASSERT_EQ(inv.names.size(), 4u);
  EXPECT_EQ(inv.names[0], "Tesla T10");
}

}  // namespace
}  // namespace h3pipe::gpu
