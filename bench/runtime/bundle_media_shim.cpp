// BundleMediaShim: a stand-in for media::resize_bilinear linked only into the device-machine
// bundle (scripts/gpu_check.sh --bundle: model_gpu_test_bundle, bench_runtime_device).  The
// bundle leaves out common/media, whose libav closure (~200 MB of codec libraries) cannot travel
// to the device machine; the model needs media only to resize a reference image, and the device
// checks never pass one.  Never linked into a service or a CI test.
#include <cstdio>
#include <cstdlib>

#include "common/media/media.h"

namespace h3pipe::media {

Image resize_bilinear(const Image&, int, int) {
  std::fprintf(stderr,
               "BundleMediaShim: reference images are not supported in the device bundle\n");
  std::abort();
}

}  // namespace h3pipe::media
