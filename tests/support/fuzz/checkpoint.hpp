// tests/support/fuzz/checkpoint.hpp — the checkpoint reader's fuzz target: what restore does with
// a file of arbitrary bytes (a damaged disk, a truncated copy, a hostile upload).
//
// One function shared by the libFuzzer entry point (tests/fuzz/checkpoint_fuzz.cpp) and the
// bounded random-input test every build runs (tests/checkpoint/reader_random_test.cpp). The
// bytes become a file (a memfd); the target reads its header and restores it into a float
// tensor "a", an int64 counter "step", a sampler "data" and a two-copy variable "w" with its
// optimizer state, which an Adam update then continues from. It calls std::abort() — a crash to
// libFuzzer, a failed test to ctest — when:
//   - anything but a CheckpointError comes out of reading or restoring, or anything but a
//     UsageError (another optimizer's state) out of the update after a restore;
//   - an accepted header breaks the format's rules: tensors that do not tile the data exactly,
//     a size that is not its shape times its element size, data that starts elsewhere than
//     after the header;
//   - a failed restore changed what it restores into.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/core/error.hpp>
#include <strata/data/sampler.hpp>
#include <strata/optim/adam.hpp>
#include <strata/placement/variable.hpp>

namespace strata::testing {

namespace fuzz_detail {

[[noreturn]] inline void checkpoint_failure(std::string_view what) {
  std::fprintf(stderr, "fuzz_checkpoint: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

inline void checkpoint_require(bool condition, std::string_view what) {
  if (!condition) checkpoint_failure(what);
}

// The format's rules for a header the reader accepted, checked independently of it.
inline void check_accepted(const checkpoint::Header& header, std::uint64_t file_size) {
  checkpoint_require(header.data_start >= 8 && header.data_start <= file_size,
                     "the data starts outside the file");
  std::uint64_t covered = 0;
  for (const auto& tensor : header.tensors) {
    checkpoint_require(tensor.begin == covered, "accepted tensors overlap or leave a hole");
    // Long division instead of a product that could overflow: bytes / size / extents == 1,
    // or no bytes when an extent is 0.
    const std::uint64_t bytes = tensor.end - tensor.begin;
    bool fits = false;
    if (std::find(tensor.shape.begin(), tensor.shape.end(), 0) != tensor.shape.end()) {
      fits = bytes == 0;
    } else {
      std::uint64_t rest = bytes;
      fits = rest % size_of(tensor.dtype) == 0;
      rest /= size_of(tensor.dtype);
      for (const auto extent : tensor.shape) {
        fits = fits && rest % extent == 0;
        rest /= extent;
      }
      fits = fits && rest == 1;
    }
    checkpoint_require(fits, "an accepted tensor's size is not its shape times its element size");
    covered = tensor.end;
  }
  checkpoint_require(header.data_start + covered == file_size,
                     "accepted tensors do not cover the data");
}

}  // namespace fuzz_detail

inline void fuzz_checkpoint(std::span<const std::uint8_t> data) {
  using fuzz_detail::checkpoint_require;
  const int fd = ::memfd_create("strata_fuzz_checkpoint", MFD_CLOEXEC);
  checkpoint_require(fd >= 0, "memfd_create failed");
  std::size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    checkpoint_require(n > 0, "writing the memfd failed");
    written += static_cast<std::size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  try {
    const checkpoint::Header header = checkpoint::Checkpoint::read_header(path);
    fuzz_detail::check_accepted(header, data.size());
  } catch (const CheckpointError&) {
  } catch (const std::exception& e) {
    fuzz_detail::checkpoint_failure(std::string("read_header threw ") + e.what());
  }

  std::vector<float> a(3, 1.5f);
  std::int64_t step = 7;
  const data::EpochSampler sampler({.num_examples = 10, .global_batch = 4, .seed = 1});
  data::SamplerPosition position{2, 1};
  checkpoint::Checkpoint checkpoint;
  checkpoint.track("a", std::span(a));
  checkpoint.track("step", step);
  checkpoint.track("data", sampler, position);
  const std::vector<float> w_initial{0.5f, -0.5f, 2.0f};
  placement::Variable<float, std::allocator<float>> w(2, w_initial,
                                                      placement::VariableAggregation::mean);
  checkpoint.track("w", w, {3});
  bool restored = false;
  try {
    checkpoint.restore(path);
    restored = true;
  } catch (const CheckpointError&) {
    checkpoint_require(std::all_of(a.begin(), a.end(), [](float x) { return x == 1.5f; }) &&
                           step == 7 && position == data::SamplerPosition{2, 1},
                       "a failed restore changed what it restores into");
    for (std::size_t c = 0; c < w.num_copies(); ++c)
      checkpoint_require(std::equal(w.copy(c).begin(), w.copy(c).end(), w_initial.begin()) &&
                             w.optimizer_state(c) == nullptr,
                         "a failed restore changed a variable or its optimizer state");
  } catch (const std::exception& e) {
    fuzz_detail::checkpoint_failure(std::string("restore threw ") + e.what());
  }
  if (restored) {
    // Training continues from whatever state the file held: an update either applies or says
    // the state belongs to another optimizer (UBSan stops the fuzzer on an overflow here).
    const optim::Adam adam{.learning_rate = 0.01};
    const std::vector<float> gradient{1.0f, -1.0f, 0.25f};
    try {
      for (std::size_t c = 0; c < w.num_copies(); ++c)
        adam.apply(w.copy(c), gradient, w.optimizer_state(c, adam));
    } catch (const UsageError&) {
    } catch (const std::exception& e) {
      fuzz_detail::checkpoint_failure(std::string("an update after the restore threw ") + e.what());
    }
  }
  ::close(fd);
}

}  // namespace strata::testing
