#pragma once
// Files a job names for a stage to read (its referenceImage) come only from the configured input
// roots (config limits.input_roots; default <state_dir>/inputs), so a job cannot make a service
// read, and upload to a ComfyUI server, any file the service can read (/etc/shadow, a key).
//
// A path is accepted when it resolves, without following a symlink anywhere below the root
// (common/artifacts/safe_path.h: openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or the walk), to a
// regular file under one of the roots:
//   - absolute: it must lie under a root as written (no "..", no "."), then opens beneath it;
//   - relative: it is looked up beneath each root in order, the first that has it wins.
// Refused: no roots configured, a NUL byte, "..", a symlink below the root, anything not a
// regular file (directory, device, FIFO, socket), a file on procfs or sysfs.  Opening never
// blocks (O_NONBLOCK, so a FIFO cannot hang it) and never makes a controlling terminal.
//
// Errors (code input.refused): the message is the reason alone, for spec::FieldError, e.g.
// "/etc/shadow is not under an input root (limits.input_roots: /srv/h3pipe/inputs)".
// Thread-safe; no state.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/artifacts/safe_path.h"
#include "common/core/result.h"

namespace h3pipe::spec {

struct InputFile {
  artifacts::UniqueFd fd;  // open read-only on the regular file
  std::uint64_t size = 0;
  std::filesystem::path path;  // root / relative part, for messages
};

Result<InputFile> open_input(const std::vector<std::filesystem::path>& roots,
                             const std::string& path);

}  // namespace h3pipe::spec
