#include "common/queue/connector.h"

namespace h3pipe::queue {

Result<std::unique_ptr<Redis>> Connector::connect() const {
  return Redis::connect(addr_);
}

}  // namespace h3pipe::queue
