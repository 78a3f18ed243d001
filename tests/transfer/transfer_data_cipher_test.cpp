// The AES-256-GCM data frames of a hand-off (common/transfer/data_cipher.h, issue #36 item 8):
// a round trip, and the refusals: a tampered byte (data, header, tag), a replayed frame, a
// reordered frame, a frame of another transfer, a truncated frame, a frame after the last one,
// a wrong key.  Every refusal poisons the opener and never leaves plaintext in the output.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <random>
#include <vector>

#include "common/core/error_codes.h"
#include "common/transfer/data_cipher.h"

namespace h3pipe::transfer {
namespace {

using Bytes = std::vector<unsigned char>;

Bytes random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<unsigned char>(g());
  return b;
}

// A latent of `size` bytes sealed in frames of `chunk` from `start`.
struct Sealed {
  DataKey key;
  std::vector<Bytes> frames;
};
Sealed seal_all(const Bytes& data, std::size_t chunk, std::uint64_t tid, std::uint64_t start = 0) {
  auto key = DataKey::random();
  EXPECT_TRUE(key.ok());
  auto s = FrameSealer::make(*key, tid);
  EXPECT_TRUE(s.ok());
  Sealed out{*key, {}};
  for (std::uint64_t off = start; off < data.size(); off += chunk) {
    std::size_t n = std::min<std::size_t>(chunk, data.size() - off);
    Bytes f(sealed_size(n));
    bool last = off + n == data.size();
    auto st = s->seal(off, {data.data() + off, n}, last, f);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    out.frames.push_back(std::move(f));
  }
  return out;
}

FrameOpener opener(const DataKey& k, std::uint64_t tid, std::uint64_t start = 0) {
  auto o = FrameOpener::make(k, tid, start);
  EXPECT_TRUE(o.ok());
  return std::move(*o);
}

void expect_refused(const Result<DataHeader>& r, std::string_view word) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, errc::transfer::kProtocol.id);
  EXPECT_NE(r.error().message.find(word), std::string::npos) << r.error().message;
}

TEST(DataCipher, RoundTripInOrderIncludingInPlace) {
  const Bytes data = random_bytes(300'000, 1);
  auto sealed = seal_all(data, 65'536, 42);
  ASSERT_EQ(sealed.frames.size(), 5u);
  auto o = opener(sealed.key, 42);
  Bytes got;
  for (auto& f : sealed.frames) {
    // In place: the plaintext lands where the ciphertext was (what the receiver does).
    std::span<unsigned char> out(f.data() + kHeaderBytes, f.size() - kHeaderBytes);
    auto h = o.open(f, out);
    ASSERT_TRUE(h.ok()) << h.error().to_string();
    EXPECT_EQ(h->offset, got.size());
    got.insert(got.end(), out.begin(), out.begin() + h->len);
  }
  EXPECT_TRUE(o.complete());
  EXPECT_EQ(got, data);
  EXPECT_EQ(o.next_offset(), data.size());
}

TEST(DataCipher, CiphertextIsNotThePlaintextAndKeysDiffer) {
  const Bytes data(4096, 0x55);
  auto a = seal_all(data, 4096, 1), b = seal_all(data, 4096, 1);
  EXPECT_NE(a.key.bytes(), b.key.bytes());
  Bytes ct(a.frames[0].begin() + kHeaderBytes, a.frames[0].begin() + kHeaderBytes + 4096);
  EXPECT_NE(ct, data);
  EXPECT_NE(a.frames[0], b.frames[0]);
}

TEST(DataCipher, ResumeStartsAtTheGrantedOffset) {
  const Bytes data = random_bytes(10'000, 2);
  auto sealed = seal_all(data, 4096, 9, 4096);
  auto o = opener(sealed.key, 9, 4096);
  Bytes out(4096);
  for (auto& f : sealed.frames) ASSERT_TRUE(o.open(f, out).ok());
  EXPECT_TRUE(o.complete());
  auto wrong = opener(sealed.key, 9, 0);
  expect_refused(wrong.open(sealed.frames[0], out), "offset 4096");
}

TEST(DataCipher, TamperedByteAnywhereIsRefusedAndOutputWiped) {
  const Bytes data = random_bytes(1000, 3);
  auto sealed = seal_all(data, 1000, 5);
  const Bytes& f0 = sealed.frames[0];
  // A byte of the ciphertext, of the tag, and of each authenticated header field.
  for (std::size_t at : {std::size_t{kHeaderBytes + 17}, f0.size() - 1, std::size_t{24},
                         std::size_t{4}, std::size_t{16}, std::size_t{8}}) {
    Bytes f = f0;
    f[at] ^= 0x01;
    auto o = opener(sealed.key, 5);
    Bytes out(1000, 0xEE);
    auto r = o.open(f, out);
    ASSERT_FALSE(r.ok()) << "flipped byte " << at;
    EXPECT_EQ(r.error().code, errc::transfer::kProtocol.id);
    EXPECT_TRUE(o.failed());
    // Either refused before decrypting (untouched) or after (zeroed): never the plaintext.
    EXPECT_NE(out, data) << "flipped byte " << at;
    EXPECT_TRUE(out == Bytes(1000, 0xEE) || out == Bytes(1000, 0)) << "flipped byte " << at;
    // The genuine frame is refused too: the transfer has failed and is retried afresh.
    expect_refused(o.open(f0, out), "earlier frame");
  }
  // A flipped ciphertext byte gets as far as the tag check.
  Bytes f = f0;
  f[kHeaderBytes] ^= 0x80;
  auto o = opener(sealed.key, 5);
  Bytes out(1000);
  expect_refused(o.open(f, out), "authentication");
  EXPECT_EQ(out, Bytes(1000, 0));
}

TEST(DataCipher, ReplayedFrameIsRefused) {
  const Bytes data = random_bytes(3 * 512, 4);
  auto sealed = seal_all(data, 512, 6);
  auto o = opener(sealed.key, 6);
  Bytes out(512);
  ASSERT_TRUE(o.open(sealed.frames[0], out).ok());
  ASSERT_TRUE(o.open(sealed.frames[1], out).ok());
  expect_refused(o.open(sealed.frames[1], out), "replayed frame 1");
  expect_refused(o.open(sealed.frames[2], out), "earlier frame");
  EXPECT_FALSE(o.complete());
}

TEST(DataCipher, ReplayIntoAnotherTransferIsRefused) {
  const Bytes data = random_bytes(512, 5);
  auto a = seal_all(data, 512, 6);
  auto b = seal_all(data, 512, 7);
  // Under b's key (a fresh key per transfer), a's frame does not authenticate, and it names
  // transfer 6 besides.
  auto o = opener(b.key, 7);
  Bytes out(512);
  expect_refused(o.open(a.frames[0], out), "transfer 6");
  // Same key, but a header rewritten to name transfer 7: the tag no longer matches.
  Bytes f = a.frames[0];
  f[8] = 7;
  auto o2 = opener(a.key, 7);
  expect_refused(o2.open(f, out), "authentication");
}

TEST(DataCipher, ReorderedFrameIsRefused) {
  const Bytes data = random_bytes(3 * 512, 6);
  auto sealed = seal_all(data, 512, 8);
  auto o = opener(sealed.key, 8);
  Bytes out(512);
  ASSERT_TRUE(o.open(sealed.frames[0], out).ok());
  expect_refused(o.open(sealed.frames[2], out), "frame 2 out of order");
  expect_refused(o.open(sealed.frames[1], out), "earlier frame");
}

TEST(DataCipher, TruncationIsSeen) {
  const Bytes data = random_bytes(3 * 512, 7);
  auto sealed = seal_all(data, 512, 9);
  // A frame cut short.
  auto o = opener(sealed.key, 9);
  Bytes out(512);
  Bytes cut(sealed.frames[0].begin(), sealed.frames[0].end() - 1);
  expect_refused(o.open(cut, out), "bytes");
  // A stream cut short: every frame opens but the last never came, so it is not complete.
  auto o2 = opener(sealed.key, 9);
  ASSERT_TRUE(o2.open(sealed.frames[0], out).ok());
  ASSERT_TRUE(o2.open(sealed.frames[1], out).ok());
  EXPECT_FALSE(o2.complete());
  // Clearing the "last" flag of the last frame breaks its tag.
  Bytes f = sealed.frames[2];
  f[4] = 0;
  expect_refused(o2.open(f, out), "authentication");
}

TEST(DataCipher, NothingAfterTheLastFrame) {
  const Bytes data = random_bytes(512, 8);
  auto key = DataKey::random();
  ASSERT_TRUE(key.ok());
  auto s = FrameSealer::make(*key, 3);
  ASSERT_TRUE(s.ok());
  Bytes f0(sealed_size(512)), f1(sealed_size(512));
  ASSERT_TRUE(s->seal(0, data, true, f0).ok());
  ASSERT_TRUE(s->seal(512, data, false, f1).ok());  // a (misbehaving) sender goes on
  auto o = opener(*key, 3);
  Bytes out(512);
  ASSERT_TRUE(o.open(f0, out).ok());
  EXPECT_TRUE(o.complete());
  expect_refused(o.open(f1, out), "after the last");
}

TEST(DataCipher, WrongKeyIsRefused) {
  const Bytes data = random_bytes(2048, 9);
  auto sealed = seal_all(data, 2048, 10);
  auto other = DataKey::random();
  ASSERT_TRUE(other.ok());
  auto o = opener(*other, 10);
  Bytes out(2048, 0xEE);
  expect_refused(o.open(sealed.frames[0], out), "authentication");
  EXPECT_EQ(out, Bytes(2048, 0));
}

TEST(DataCipher, KeyFromOfferBytes) {
  auto k = DataKey::random();
  ASSERT_TRUE(k.ok());
  auto back = DataKey::from_bytes(k->bytes());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->bytes(), k->bytes());
  auto bad = DataKey::from_bytes("short");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("data_key"), std::string::npos);
}

TEST(DataCipher, SealRefusesAWrongBufferSize) {
  auto k = DataKey::random();
  ASSERT_TRUE(k.ok());
  auto s = FrameSealer::make(*k, 1);
  ASSERT_TRUE(s.ok());
  Bytes plain(100), out(sealed_size(100) - 1);
  EXPECT_FALSE(s->seal(0, plain, true, out).ok());
  EXPECT_EQ(s->next_index(), 0u);  // no index spent on a refused seal
}

TEST(DataCipher, JunkFromAnUnboundConnectionDoesNotFailTheTransfer) {
  const Bytes data = random_bytes(1024, 10);
  auto sealed = seal_all(data, 512, 11);
  auto o = opener(sealed.key, 11);
  Bytes out(512);
  Bytes forged = sealed.frames[0];
  forged[kHeaderBytes + 3] ^= 0x10;
  expect_refused(o.open(forged, out, /*fail_transfer=*/false), "authentication");
  EXPECT_FALSE(o.failed());
  expect_refused(o.open(sealed.frames[1], out, false), "out of order");
  EXPECT_FALSE(o.failed());
  ASSERT_TRUE(o.open(sealed.frames[0], out, false).ok());
  ASSERT_TRUE(o.open(sealed.frames[1], out).ok());
  EXPECT_TRUE(o.complete());
}

// Not a timing assertion: prints the CPU cost of sealing and opening a 4.3 MB latent in 256 KiB
// frames (docs/transfer.md quotes it).
TEST(DataCipher, PrintsTheCostOfA43MBLatent) {
  const Bytes data = random_bytes(4'300'000, 12);
  const auto t0 = std::clock();
  constexpr int kReps = 20;
  for (int i = 0; i < kReps; ++i) {
    auto sealed = seal_all(data, 256 * 1024, 12);
    auto o = opener(sealed.key, 12);
    for (auto& f : sealed.frames) {
      std::span<unsigned char> out(f.data() + kHeaderBytes, f.size() - kHeaderBytes);
      ASSERT_TRUE(o.open(f, out).ok());
    }
    ASSERT_TRUE(o.complete());
  }
  const double ms = 1e3 * double(std::clock() - t0) / CLOCKS_PER_SEC / kReps;
  std::printf("data_cipher: seal + open of 4.3 MB: %.2f ms CPU (incl. copying), %.2f GB/s\n", ms,
              4.3e6 / (ms * 1e-3) / 1e9);
}

}  // namespace
}  // namespace h3pipe::transfer
