#pragma once
// CURVE key pairs for the transfer service (`h3pipe keygen`): Z85 text files, NAME.pub (public,
// 0644) and NAME.key (secret, 0600).  Keys are 40-character Z85 strings (32 bytes).
#include <filesystem>
#include <string>

#include "common/core/result.h"

namespace h3pipe::transfer {

struct KeyPair {
  std::string public_z85;
  std::string secret_z85;
  std::filesystem::path public_path;
  std::filesystem::path secret_path;
};

// Generates a key pair with zmq_curve_keypair and writes DIR/NAME.pub and DIR/NAME.key (created
// 0600 before any byte is written).  Refuses to overwrite existing files unless `overwrite`.
// Errors: keygen.unsupported (libzmq without CURVE), keygen.exists, io.*.
Result<KeyPair> keygen(const std::filesystem::path& dir, const std::string& name = "transfer",
                       bool overwrite = false);

// True when `key` is 40 Z85 characters that decode to 32 bytes.
bool is_z85_key(std::string_view key);

// Reads a key file (first line, surrounding whitespace trimmed) and validates it.  A secret key
// file readable by group or others is refused (keys.permissions).
Result<std::string> load_key_file(const std::filesystem::path& path, bool secret);

// Derives the public key of a Z85 secret key (zmq_curve_public).
Result<std::string> public_of(const std::string& secret_z85);

}  // namespace h3pipe::transfer
