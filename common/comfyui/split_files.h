#pragma once
// Writing a split to its folder, all or nothing: every file is first written beside its final
// name as a hidden temporary (O_EXCL, O_NOFOLLOW, fsynced), and only when all of them are written
// are they renamed into place and the folder fsynced.  Nothing is ever written outside DIR: the
// names are fixed, and an existing name that is a symlink is refused.
#include <filesystem>
#include <string>
#include <vector>

#include "common/comfyui/split.h"

namespace h3pipe::comfyui {

struct OutputFile {
  std::string name;  // a plain file name inside the folder
  std::string content;
};

// sample.api.json, decode.api.json, inject.json, config.snippet.json (2-space indented JSON).
std::vector<OutputFile> split_files(const SplitResult& r);

// Errors: comfyui.split.exists (a file is there and !force; names it), comfyui.split.write (the
// folder cannot be created or written; names the path).  On error nothing of this call is left.
Status write_files(const std::filesystem::path& dir, const std::vector<OutputFile>& files,
                   bool force);

}  // namespace h3pipe::comfyui
