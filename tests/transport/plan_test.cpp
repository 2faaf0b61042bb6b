// Tests of strata/transport/plan.hpp's ReceiveHandler: whatever an algorithm passes as its
// handler (a lambda with state, a const one, a function, a function pointer) is what runs,
// with the index it is given, and the state it changes is the caller's own.
#include <strata/transport/plan.hpp>

#include <cstddef>
#include <vector>

#include <doctest/doctest.h>

namespace {

using strata::transport::ReceiveHandler;

std::vector<std::size_t> handled_by_function;

void record(std::size_t j) {
  handled_by_function.push_back(j);
}

int record_twice(std::size_t j) {
  handled_by_function.push_back(j);
  handled_by_function.push_back(j);
  return 0;
}

// As a link calls it: through the one type.
void run(ReceiveHandler handler, std::size_t first, std::size_t count) {
  for (std::size_t j = first; j < first + count; ++j)
    handler(j);
}

}  // namespace

TEST_CASE("a lambda's own state changes, with every index in order") {
  std::vector<std::size_t> handled;
  auto lambda = [&](std::size_t j) { handled.push_back(j); };
  run(lambda, 3, 4);
  CHECK(handled == std::vector<std::size_t>{3, 4, 5, 6});

  const auto& constant = lambda;
  run(constant, 9, 1);
  run([&](std::size_t j) { handled.push_back(j * 10); }, 1, 2);
  CHECK(handled == std::vector<std::size_t>{3, 4, 5, 6, 9, 10, 20});
}

TEST_CASE("a mutable lambda is called, not a copy of it") {
  std::size_t calls = 0;
  auto counting = [calls_seen = std::size_t{0}, &calls](std::size_t) mutable {
    ++calls_seen;
    calls = calls_seen;
  };
  run(counting, 0, 5);
  run(counting, 0, 2);
  CHECK(calls == 7);  // the second run went on from the first one's count
}

TEST_CASE("a function, a function pointer and a function with a result") {
  handled_by_function.clear();
  run(record, 1, 2);
  run(&record, 7, 1);
  run(record_twice, 4, 1);
  CHECK(handled_by_function == std::vector<std::size_t>{1, 2, 7, 4, 4});
}
