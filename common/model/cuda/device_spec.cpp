// The "device" setting's grammar, and the stand-ins of backend.h for a build without CUDA.
#include <charconv>

#include "common/model/cuda/backend.h"

namespace h3pipe::model {

Result<DeviceSpec> parse_device(const std::string& s) {
  DeviceSpec d;
  if (s == "cpu") return d;
  d.cuda = true;
  if (s == "cuda") return d;
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() <= 8) {
    int n = -1;
    const char* b = s.data() + 5;
    const auto [p, ec] = std::from_chars(b, s.data() + s.size(), n);
    if (ec == std::errc() && p == s.data() + s.size() && n >= 0) {
      d.ordinal = n;
      return d;
    }
  }
  return make_error(errc::config::kInvalid,
                    "expected \"cpu\", \"cuda\" or \"cuda:N\" (N a CUDA device index); got \"{}\"",
                    s);
}

#ifndef H3PIPE_HAVE_CUDA
bool cuda_built() {
  return false;
}
int cuda_device_count() {
  return 0;
}
Result<std::unique_ptr<DeviceBackend>> make_cuda_backend(const Weights&, const ModelConfig& c,
                                                         unsigned, int) {
  return make_error(errc::runtime::kPermanentConfig,
                    "device \"{}\": this build of h3pipe has no CUDA backend (configure with the "
                    "CUDA toolkit present, H3PIPE_CUDA=ON)",
                    c.device);
}
Result<double> cuda_gemm_peak_tflops(int, int, int) {
  return make_error(errc::runtime::kPermanentConfig, "this build of h3pipe has no CUDA backend");
}
#endif

}  // namespace h3pipe::model
