// The transfer service's CPU slice (common/transfer/cpu_slice.h, issue #36 item 8): the slice
// asked for is the one the kernel reports for the thread and for the threads it starts later,
// and the thread's nice value stays what it was.
#include "common/transfer/cpu_slice.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace h3pipe::transfer {
namespace {

// The calling thread's "se.slice" from /proc/thread-self/sched, ns (-1: the kernel has none).
long long thread_slice_ns() {
  std::ifstream in("/proc/thread-self/sched");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("se.slice", 0) != 0) continue;
    return std::stoll(line.substr(line.find(':') + 1));
  }
  return -1;
}

TEST(CpuSlice, AskedSliceIsKeptInheritedAndNiceUntouched) {
  std::thread([] {
    ASSERT_EQ(::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 5), 0);
    const long long before = thread_slice_ns();
    auto got = request_cpu_slice(300);
    ASSERT_TRUE(got.ok()) << got.error().message;
    // Raising nice needs no privilege and lowering it does: the call gave it back unchanged.
    EXPECT_EQ(::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid())), 5);
    if (*got == 0) {  // a kernel without custom slices for ordinary threads: nothing changed
      EXPECT_EQ(thread_slice_ns(), before);
      return;
    }
    EXPECT_EQ(*got, 300);
    EXPECT_EQ(thread_slice_ns(), 300'000);
    long long child = 0;
    std::thread([&] { child = thread_slice_ns(); }).join();
    EXPECT_EQ(child, 300'000) << "a thread started afterwards inherits the slice";
  }).join();
}

TEST(CpuSlice, ZeroAsksForNothing) {
  std::thread([] {
    const long long before = thread_slice_ns();
    auto got = request_cpu_slice(0);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 0);
    EXPECT_EQ(thread_slice_ns(), before);
  }).join();
}

}  // namespace
}  // namespace h3pipe::transfer
