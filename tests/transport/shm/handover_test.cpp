// Tests of strata/transport/shm/{region,handover,group}.hpp: what a rank accepts from a peer.
//   - a region adopts only a sealed memfd of the expected size;
//   - the handover gives the descriptor only to a connection that presents the secret, and a
//     stranger's connection neither gets it nor stops the rightful peer from getting it;
//   - descriptors a peer posts that name no call are refused, not interpreted.
#include <strata/transport/shm/group.hpp>
#include <strata/transport/shm/handover.hpp>
#include <strata/transport/shm/region.hpp>

#include <chrono>
#include <cstring>
#include <thread>

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <doctest/doctest.h>

namespace {

using namespace std::chrono_literals;
using strata::Deadline;
namespace shm = strata::transport::shm;

}  // namespace

TEST_CASE("a region adopts only a sealed memfd of exactly the expected size") {
  auto region = shm::Region::create(8192, 0);
  CHECK(region.size() == 8192);
  CHECK((::fcntl(region.fd(), F_GET_SEALS) & F_SEAL_SHRINK) != 0);
  // Sealed: a peer cannot shrink it under the others' mappings.
  CHECK(::ftruncate(region.fd(), 4096) != 0);

  auto adopted = shm::Region::adopt(::dup(region.fd()), 8192, 1, 0);
  adopted.data()[100] = std::byte{42};
  CHECK(region.data()[100] == std::byte{42});

  CHECK_THROWS_AS(shm::Region::adopt(::dup(region.fd()), 4096, 1, 0), strata::PeerFailureError);
  const int unsealed = ::memfd_create("unsealed", MFD_CLOEXEC);
  REQUIRE(unsealed >= 0);
  REQUIRE(::ftruncate(unsealed, 8192) == 0);
  try {
    shm::Region::adopt(unsealed, 8192, 1, 0);
    FAIL("an unsealed memfd was adopted");
  } catch (const strata::PeerFailureError& error) {
    CHECK(std::string(error.what()).find("rank 0 handed over a region") != std::string::npos);
  }
}

TEST_CASE("the handover gives the descriptor only to a peer that presents the secret") {
  auto region = shm::Region::create(4096, 0);
  shm::HandoverServer server(0);
  // A stranger connects to the address first, with a wrong secret.
  std::jthread stranger([&] {
    shm::HandoverTicket wrong = server.ticket();
    wrong.secret[0] ^= std::byte{1};
    CHECK_THROWS_AS(shm::collect_handover(wrong, 7, Deadline::after(5s)),
                    strata::ConfigurationError);
  });
  std::this_thread::sleep_for(100ms);
  std::jthread peer([&] {
    const int fd = shm::collect_handover(server.ticket(), 1, Deadline::after(5s));
    auto adopted = shm::Region::adopt(fd, 4096, 1, 0);
    adopted.data()[7] = std::byte{9};
  });
  server.serve(region.fd(), 1, Deadline::after(5s));
  peer.join();
  stranger.join();
  CHECK(region.data()[7] == std::byte{9});
}

TEST_CASE("a handover nobody collects ends at its deadline with a ConfigurationError") {
  auto region = shm::Region::create(4096, 0);
  shm::HandoverServer server(0);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(server.serve(region.fd(), 1, Deadline::after(300ms)), strata::ConfigurationError);
  CHECK(std::chrono::steady_clock::now() - start < 3s);
}

TEST_CASE("descriptors that name no call are refused, not interpreted") {
  const shm::Layout layout{2, 64 << 10};
  auto region = shm::Region::create(layout.total_bytes(), 0);
  shm::Group::initialize(region, layout);
  CHECK(shm::Group::describes(region, layout));
  CHECK_FALSE(shm::Group::describes(region, shm::Layout{3, 64 << 10}));
  shm::Group group(std::move(region), layout, 0, false);
  strata::CollectiveCall call;
  call.kind = strata::Collective::all_reduce;
  call.type = strata::DataType::float32;
  call.count = 12345;
  strata::CollectiveCall user = call;
  user.kind = strata::Collective::reduce_scatter;
  group.post(call, user, 0);
  const auto posted = group.posted(0, 0);
  REQUIRE(posted);
  CHECK(agrees(posted->call, call));
  CHECK(agrees(posted->user, user));
  // Rank 1 never posted: all zeros read as a barrier, a valid call; garbage does not.
  CHECK(group.posted(1, 0));
  call.kind = static_cast<strata::Collective>(200);
  group.post(call, user, 1);
  CHECK_FALSE(group.posted(0, 1));
  group.post(user, call, 1);
  CHECK_FALSE(group.posted(0, 1));
}
