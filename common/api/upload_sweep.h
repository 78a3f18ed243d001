#pragma once
// What a killed h3pipe-api left of its uploads (issue #37, "Bad input": nothing accepted is lost,
// nothing half-written stays; docs/api.md, "POST /v1/videos"): an upload streams to a temporary
// api-uploads/<id>/reference.<ext>.p<pid>-<hex>.part (upload_stream.h) that the API removes on
// every error, but a kill -9 mid-body leaves it.  At start the API removes those of its own
// naming pattern, and their pending .sha256 sidecars, directly under <input root>/api-uploads/*/,
// never following a symlink (each folder opened O_NOFOLLOW beneath the root, only regular files
// removed), and only those nothing has written for `min_age`.
//
// Age, not the pid in the name: replicas of the API may share an input root (one NFS export
// behind a load balancer), and a pid of another host says nothing here (dead here, alive there;
// or alive here by reuse).  A live upload writes its temporary at least every 5 s, the longest
// pause mid-body the API allows (gated_http.cpp, kReadPause) before it drops the client and
// removes the file itself, so a temporary untouched for a minute belongs to no live upload on any
// host; the commit (fsync, sidecar, rename) takes far less.
#include <chrono>
#include <cstddef>
#include <filesystem>

namespace h3pipe::api {

inline constexpr std::chrono::seconds kUploadTempMinAge{60};

// Returns how many files were removed (a folder left empty by them is removed too).
std::size_t sweep_dead_uploads(const std::filesystem::path& input_root,
                               std::chrono::seconds min_age = kUploadTempMinAge);

}  // namespace h3pipe::api
