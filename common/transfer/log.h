#pragma once
// The transfer library's component logger ("transfer", common/logging/log.h), one for all of its
// files: the sender and the receiver are each split over several.  Private to common/transfer.
#include "common/logging/log.h"

namespace h3pipe::transfer::detail {

inline spdlog::logger& logger() {
  static const auto l = logging::get("transfer");
  return *l;
}

}  // namespace h3pipe::transfer::detail
