#include "common/transfer/cpu_slice.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/core/error_codes.h"

namespace h3pipe::transfer {
namespace {

// struct sched_attr of Linux's uapi header linux/sched/types.h; glibc 2.36 has no wrapper for it.
struct SchedAttr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;  // a fair task's requested slice, ns (EEVDF, 6.12+)
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
  std::uint32_t sched_util_min;
  std::uint32_t sched_util_max;
};

Error sys_failure(const char* call) {
  return make_error(errc::transfer::kSlice, "{}: {}", call, std::strerror(errno));
}

bool get_attr(SchedAttr* a) {
  *a = SchedAttr{};
  return ::syscall(SYS_sched_getattr, 0, a, static_cast<unsigned>(sizeof *a), 0u) == 0;
}

}  // namespace

Result<int> request_cpu_slice(int us) {
  if (us <= 0) return 0;
  SchedAttr a;
  if (!get_attr(&a)) return sys_failure("sched_getattr");
  // The policy, nice value and clamps read back and given again as they are: only the slice
  // changes (SCHED_FLAG_KEEP_PARAMS would keep the slice too).
  a.size = sizeof a;
  a.sched_flags = 0;
  a.sched_runtime = static_cast<std::uint64_t>(us) * 1000u;
  if (::syscall(SYS_sched_setattr, 0, &a, 0u) != 0) return sys_failure("sched_setattr");
  SchedAttr back;
  if (!get_attr(&back)) return sys_failure("sched_getattr");
  return static_cast<int>(back.sched_runtime / 1000u);
}

}  // namespace h3pipe::transfer
