// Tests for strata/cluster/slurm.hpp: SLURM host list expressions and tasks-per-node lists.
#include <strata/cluster/slurm.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

namespace {

using strata::cluster::expand_hostlist;
using strata::cluster::expand_tasks_per_node;
using Names = std::vector<std::string>;

// Checks that `call` throws ConfigurationError for `setting`, quoting `text` and naming
// `position` (1-based) and `problem`.
template <class Call>
void check_rejected(Call call, std::string_view text, std::string_view setting,
                    std::string_view problem, std::size_t position) {
  CAPTURE(std::string(text));
  bool thrown = false;
  try {
    call();
  } catch (const strata::ConfigurationError& e) {
    thrown = true;
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(e.rank() == -1);
    CHECK(e.operation() == setting);
    CHECK(message.starts_with("strata: " + std::string(setting) + ": cannot expand the "));
    CHECK(message.find("'" + std::string(text) + "'") != std::string::npos);
    CHECK(message.find(problem) != std::string::npos);
    CHECK(message.find("at position " + std::to_string(position) + ";") != std::string::npos);
  }
  CHECK(thrown);
}

void check_bad_hostlist(std::string_view list, std::string_view problem, std::size_t position) {
  check_rejected([&] { expand_hostlist(list, "SLURM_JOB_NODELIST"); }, list, "SLURM_JOB_NODELIST",
                 problem, position);
}

void check_bad_tasks(std::string_view counts, std::string_view problem, std::size_t position) {
  check_rejected([&] { expand_tasks_per_node(counts); }, counts, "SLURM_TASKS_PER_NODE", problem,
                 position);
}

TEST_CASE("expand_hostlist: the examples of the issue and of the SLURM man pages") {
  CHECK(expand_hostlist("n[01-04,07],m5") == Names{"n01", "n02", "n03", "n04", "n07", "m5"});
  // man scontrol: "tux[1-3]" and "lx[10-20]".
  CHECK(expand_hostlist("tux[1-3]") == Names{"tux1", "tux2", "tux3"});
  CHECK(expand_hostlist("lx[10-12]") == Names{"lx10", "lx11", "lx12"});
  // man sbatch/srun: "node[1-2]", "linux[00-02,5]".
  CHECK(expand_hostlist("node[1-2]") == Names{"node1", "node2"});
  CHECK(expand_hostlist("linux[00-02,5]") == Names{"linux00", "linux01", "linux02", "linux5"});
}

TEST_CASE("expand_hostlist: plain names, FQDNs and single hosts") {
  CHECK(expand_hostlist("login1") == Names{"login1"});
  CHECK(expand_hostlist("a,b,c") == Names{"a", "b", "c"});
  CHECK(expand_hostlist("gpu-01.cluster.example.org,gpu-02.cluster.example.org") ==
        Names{"gpu-01.cluster.example.org", "gpu-02.cluster.example.org"});
  CHECK(expand_hostlist("n[7]") == Names{"n7"});
  CHECK(expand_hostlist("n[3,1,3]") == Names{"n3", "n1", "n3"});  // order and repeats as written
  CHECK(expand_hostlist("node_a-1") == Names{"node_a-1"});
}

TEST_CASE("expand_hostlist: zero padding follows the lower bound, as in SLURM") {
  CHECK(expand_hostlist("n[008-011]") == Names{"n008", "n009", "n010", "n011"});
  CHECK(expand_hostlist("n[8-11]") == Names{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[098-101]") == Names{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("n[0-1]") == Names{"n0", "n1"});
  CHECK(expand_hostlist("n[00]") == Names{"n00"});
  CHECK(expand_hostlist("n[01-02,3,004]") == Names{"n01", "n02", "n3", "n004"});
}

TEST_CASE("expand_hostlist: several bracket groups, suffixes and lists") {
  CHECK(expand_hostlist("rack[1-2]-n[1-2]") ==
        Names{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(expand_hostlist("r[1-2]c[1,3]n[0-1]") ==
        Names{"r1c1n0", "r1c1n1", "r1c3n0", "r1c3n1", "r2c1n0", "r2c1n1", "r2c3n0", "r2c3n1"});
  CHECK(expand_hostlist("n[1-2]-ib") == Names{"n1-ib", "n2-ib"});
  CHECK(expand_hostlist("n[1-2].example.org") == Names{"n1.example.org", "n2.example.org"});
  CHECK(expand_hostlist("[1-2]") == Names{"1", "2"});
  CHECK(expand_hostlist("a[1-2],b,c[08-09],d[1,3]e") ==
        Names{"a1", "a2", "b", "c08", "c09", "d1e", "d3e"});
}

TEST_CASE("expand_hostlist: large lists up to the bound") {
  const Names names = expand_hostlist("n[000001-100000]");
  REQUIRE(names.size() == 100000);
  CHECK(names.front() == "n000001");
  CHECK(names.back() == "n100000");
  CHECK(expand_hostlist("n[1-1000000]").size() == strata::cluster::kMaxExpandedHosts);
}

TEST_CASE("expand_hostlist: malformed lists name the text and the position") {
  check_bad_hostlist("", "the list is empty", 1);
  check_bad_hostlist("n[1-3", "'[' without a matching ']'", 2);
  check_bad_hostlist("n1-3]", "']' without a matching '['", 5);
  check_bad_hostlist("a,n[1-2]],b", "']' without a matching '['", 9);
  check_bad_hostlist("n[1[2]]", "brackets cannot be nested", 4);
  check_bad_hostlist("n[5-3]", "the range 5-3 is reversed", 3);
  check_bad_hostlist("n[1,9-08]", "the range 9-8 is reversed", 5);
  check_bad_hostlist("n[]", "empty brackets", 3);
  check_bad_hostlist("n[1,,2]", "empty range inside brackets", 5);
  check_bad_hostlist("n[1,]", "empty range inside brackets", 5);
  check_bad_hostlist("n[,1]", "empty range inside brackets", 3);
  check_bad_hostlist("n[a-c]", "'a' is not a number or range", 3);
  check_bad_hostlist("n[1-c]", "the range has no upper bound", 5);
  check_bad_hostlist("n[1-]", "the range has no upper bound", 5);
  check_bad_hostlist("n[-3]", "'-' is not a number or range", 3);
  check_bad_hostlist("n[1-2-3]", "unexpected '-' inside brackets", 6);
  check_bad_hostlist("n[1x2]", "unexpected 'x' inside brackets", 4);
  check_bad_hostlist("n[1 ]", "unexpected ' ' inside brackets", 4);
  check_bad_hostlist("a,,b", "empty host name", 3);
  check_bad_hostlist(",a", "empty host name", 1);
  check_bad_hostlist("a,", "empty host name", 3);
  check_bad_hostlist("a b", "whitespace or a control character", 2);
  check_bad_hostlist("a\nb", "whitespace or a control character", 2);
  check_bad_hostlist("n[99999999999999999999]", "the number is too large", 3);
  check_bad_hostlist("n[1-99999999999999999999]", "the number is too large", 5);
}

TEST_CASE("expand_hostlist: hostile sizes are refused before anything is expanded") {
  check_bad_hostlist("n[0-1000000]", "it expands to more than 1000000 hosts", 3);
  check_bad_hostlist("n[0-18446744073709551615]", "it expands to more than 1000000 hosts", 3);
  check_bad_hostlist("n[1-600000,1-600000]", "it expands to more than 1000000 hosts", 12);
  // Each group is small; their product is not.
  check_bad_hostlist("a[1-1000]b[1-1000]c[1-2]", "it expands to more than 1000000 hosts", 1);
  check_bad_hostlist("x,a[1-1000]b[1-1001]", "it expands to more than 1000000 hosts", 3);
  // Many entries that each fit add up to too many.
  check_bad_hostlist("a[1-600000],b[1-600000]", "it expands to more than 1000000 hosts", 13);

  // A huge text is quoted only in part.
  const std::string long_list = std::string(5000, 'a') + "]";
  try {
    expand_hostlist(long_list);
    FAIL("expected a ConfigurationError");
  } catch (const strata::ConfigurationError& e) {
    const std::string message = e.what();
    CHECK(message.size() < 800);
    CHECK(message.find("(5001 characters)") != std::string::npos);
    CHECK(message.find("at position 5001") != std::string::npos);
    CHECK(e.operation() == "SLURM host list");  // the default setting name
  }
}

TEST_CASE("expand_tasks_per_node: the documented forms") {
  using Counts = std::vector<int>;
  CHECK(expand_tasks_per_node("3(x2),1") == Counts{3, 3, 1});
  // man sbatch: "2(x3),1" means the first three nodes run two tasks and the fourth one.
  CHECK(expand_tasks_per_node("2(x3),1") == Counts{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4") == Counts{4});
  CHECK(expand_tasks_per_node("2(x2)") == Counts{2, 2});
  CHECK(expand_tasks_per_node("1,2,3") == Counts{1, 2, 3});
  CHECK(expand_tasks_per_node("1(x1)") == Counts{1});
  CHECK(expand_tasks_per_node("0,1") == Counts{0, 1});
  CHECK(expand_tasks_per_node("8(x1000)").size() == 1000);
  CHECK(expand_tasks_per_node("1(x1000000)").size() == strata::cluster::kMaxExpandedHosts);
}

TEST_CASE("expand_tasks_per_node: malformed lists name the text and the position") {
  check_bad_tasks("", "the list is empty", 1);
  check_bad_tasks("3(x0)", "a repeat count of 0", 4);
  check_bad_tasks("x2", "'x' where a task count was expected", 1);
  check_bad_tasks("(x2)", "'(' where a task count was expected", 1);
  check_bad_tasks("-1", "'-' where a task count was expected", 1);
  check_bad_tasks("3(2)", "expected 'x' after '('", 3);
  check_bad_tasks("3(", "expected 'x' after '('", 3);
  check_bad_tasks("3(x)", "expected a repeat count after '(x'", 4);
  check_bad_tasks("3(x2", "expected ')' after the repeat count", 5);
  check_bad_tasks("3(x2]", "expected ')' after the repeat count", 5);
  check_bad_tasks("3(x2)4", "unexpected '4'", 6);
  check_bad_tasks("3x2", "unexpected 'x'", 2);
  check_bad_tasks("3,,1", "empty item", 3);
  check_bad_tasks("3,", "empty item", 3);
  check_bad_tasks(",3", "empty item", 1);
  check_bad_tasks("3 ,1", "unexpected ' '", 2);
  check_bad_tasks("1.5", "unexpected '.'", 2);
  check_bad_tasks("99999999999999999999", "the task count is too large", 1);
  check_bad_tasks("2147483648", "the task count is too large", 1);
  check_bad_tasks("1(x99999999999999999999)", "the repeat count is too large", 4);
}

TEST_CASE("expand_tasks_per_node: absurd totals are refused before allocating") {
  check_bad_tasks("1(x1000001)", "it describes more than 1000000 nodes", 1);
  check_bad_tasks("1(x600000),1(x600000)", "it describes more than 1000000 nodes", 12);
  check_bad_tasks("2147483647,1", "it adds up to more than 2147483647 tasks", 12);
  check_bad_tasks("100000(x100000)", "it adds up to more than 2147483647 tasks", 1);
}

}  // namespace
