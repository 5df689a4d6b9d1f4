// libFuzzer target for the checkpoint loader's metadata parser (scripts/fuzz-checkpoint.sh).
// Any input must either parse or throw kopt::CheckpointError: no crash, no other exception,
// no out-of-bounds read (ASan), no undefined behaviour (UBSan), no huge allocation. What
// parses must serialize back to something that parses to the same bytes again.
#include <cstdint>
#include <cstdlib>
#include <kopt/error.hpp>
#include <kopt/impl/checkpoint_format.hpp>
#include <vector>

namespace {

// Odd first byte: the rest is a body, given a valid header (magic, version, length and
// both checksums), so the fuzzer reaches the body's parser instead of the checksum test.
std::vector<unsigned char> as_index(const std::uint8_t* data, std::size_t size) {
  if (size == 0 || (data[0] & 1) == 0) return {data, data + size};
  std::vector<unsigned char> body(data + 1, data + size);
  std::vector<unsigned char> out = {'K', 'O', 'P', 'T', 'I', 'N', 'D', 'X'};
  const auto put = [&](std::uint64_t v, int bytes) {
    for (int k = 0; k < bytes; ++k) out.push_back(static_cast<unsigned char>(v >> (8 * k)));
  };
  put(kopt::Impl::kCheckpointVersion, 4);
  put(0, 4);
  put(body.size(), 8);
  put(kopt::Impl::crc32c(body.data(), body.size()), 4);
  put(kopt::Impl::crc32c(out.data(), out.size()), 4);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<unsigned char> bytes = as_index(data, size);
  try {
    const kopt::Impl::Index index = kopt::Impl::parse_index(bytes, "fuzz");
    const std::vector<unsigned char> again = kopt::Impl::serialize_index(index);
    if (kopt::Impl::serialize_index(kopt::Impl::parse_index(again, "fuzz")) != again) std::abort();
  } catch (const kopt::CheckpointError&) {
  }
  try {
    (void)kopt::Impl::parse_blocks(data, size);
  } catch (const kopt::CheckpointError&) {
  }
  return 0;
}
