// strata/cluster/slurm.hpp — SLURM's compressed host lists and task counts.
//
// SLURM hands a job its nodes as a host list expression (SLURM_JOB_NODELIST,
// SLURM_STEP_NODELIST: "node[01-04,07],login5") and its task layout as a compressed count list
// (SLURM_TASKS_PER_NODE: "3(x2),1"). These functions expand both exactly as `scontrol show
// hostnames` and the sbatch man page describe, so that every rank derives the same node order
// without calling scontrol.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::cluster {

/// The most host names `expand_hostlist` produces (and the most nodes
/// `expand_tasks_per_node` describes); larger inputs are rejected before anything is
/// allocated, so a hostile or corrupted variable cannot exhaust memory.
inline constexpr std::size_t kMaxExpandedHosts = 1'000'000;

/// Expands a SLURM host list expression into host names, in the order written.
///
/// Syntax (see `man scontrol`, "HOSTLIST EXPRESSIONS"):
/// - hosts are separated by commas outside brackets: `n1,n2,login.example.org`;
/// - a bracket holds comma-separated numbers and inclusive ranges: `n[1-3,7]` →
///   n1 n2 n3 n7;
/// - zero padding is kept: the width of a range is the number of digits of its lower bound,
///   as in SLURM (`n[008-011]` → n008 n009 n010 n011; `n[1-10]` → n1 … n10);
/// - text may follow a bracket, and a name may hold several brackets, expanded with the
///   leftmost varying slowest: `rack[1-2]-n[1-2]` → rack1-n1 rack1-n2 rack2-n1 rack2-n2;
/// - duplicates and unsorted numbers are kept as written (`n[3,1]` → n3 n1).
///
/// Example: `expand_hostlist("n[01-04,07],m5")` → {"n01", "n02", "n03", "n04", "n07", "m5"}.
///
/// @param list     the expression, e.g. the value of SLURM_JOB_NODELIST.
/// @param setting  where it came from, used as the error's operation ("SLURM_JOB_NODELIST").
/// @throws ConfigurationError (rank -1, operation `setting`) quoting the text and the
///   1-based position of the problem for: an empty list, host or bracket part; unbalanced
///   or nested brackets; a non-numeric or reversed (`n[5-3]`) range; numbers that overflow;
///   whitespace or control characters; more than `kMaxExpandedHosts` names in all.
/// Cost: O(size of the output); nothing is allocated for the output before its size is known.
inline std::vector<std::string> expand_hostlist(std::string_view list,
                                                std::string_view setting = "SLURM host list");

/// Expands SLURM's compressed tasks-per-node list into one count per node.
///
/// Syntax (see SLURM_TASKS_PER_NODE in `man sbatch`): comma-separated items, each `N` (N tasks
/// on the next node) or `N(xM)` (N tasks on each of the next M nodes).
///
/// Example: `expand_tasks_per_node("3(x2),1")` → {3, 3, 1}.
///
/// @param counts   the list, e.g. the value of SLURM_STEP_TASKS_PER_NODE.
/// @param setting  where it came from, used as the error's operation.
/// @throws ConfigurationError (rank -1, operation `setting`) quoting the text and the
///   1-based position for: empty items, anything but digits and `(xM)`, a repeat of 0, more
///   than `kMaxExpandedHosts` nodes, or a total number of tasks that does not fit an `int`.
inline std::vector<int> expand_tasks_per_node(std::string_view counts,
                                              std::string_view setting = "SLURM_TASKS_PER_NODE");

// ---- implementation ---------------------------------------------------------------------------

namespace detail::slurm {

/// The text for an error message: hostile inputs may be huge, messages should not be.
inline std::string quote_excerpt(std::string_view text) {
  constexpr std::size_t kMaxQuoted = 200;
  if (text.size() <= kMaxQuoted) return fmt::format("'{}'", text);
  return fmt::format("'{}...' ({} characters)", text.substr(0, kMaxQuoted), text.size());
}

[[noreturn]] inline void throw_hostlist_error(std::string_view list, std::string_view setting,
                                              std::size_t position, std::string_view problem) {
  throw ConfigurationError(
      -1, setting,
      fmt::format("cannot expand the host list {}: {} at position {}", quote_excerpt(list), problem,
                  position + 1),
      "give a SLURM host list such as node[01-04,07],login5 (see `man scontrol`, HOSTLIST "
      "EXPRESSIONS)");
}

[[noreturn]] inline void throw_tasks_error(std::string_view counts, std::string_view setting,
                                           std::size_t position, std::string_view problem) {
  throw ConfigurationError(
      -1, setting,
      fmt::format("cannot expand the tasks-per-node list {}: {} at position {}",
                  quote_excerpt(counts), problem, position + 1),
      "give a SLURM task count list such as 3(x2),1 (see SLURM_TASKS_PER_NODE in `man sbatch`)");
}

inline bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

/// Parses a run of decimal digits starting at `pos` (at least one digit); returns false on
/// overflow or when no digit is there. Advances `pos` past the digits.
inline bool parse_digits(std::string_view text, std::size_t& pos, std::uint64_t& value) {
  const std::size_t start = pos;
  while (pos < text.size() && is_digit(text[pos]))
    ++pos;
  if (pos == start) return false;
  const auto [end, ec] = std::from_chars(text.data() + start, text.data() + pos, value);
  return ec == std::errc() && end == text.data() + pos;
}

struct HostRange {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  int width = 0;  // digits of the lower bound: SLURM's zero-padding rule
};

/// One part of a host name: literal text, or a bracket of ranges.
struct HostSegment {
  std::string_view text;          // when `ranges` is empty
  std::vector<HostRange> ranges;  // a bracket
  std::uint64_t count = 1;        // names this segment contributes to each combination
};

/// Parses the body of a bracket (between '[' and ']'), `first` being its offset in `list`.
inline HostSegment parse_bracket(std::string_view list, std::string_view setting, std::size_t first,
                                 std::size_t last) {
  HostSegment segment;
  segment.count = 0;
  if (first == last) throw_hostlist_error(list, setting, first, "empty brackets '[]'");
  std::size_t pos = first;
  while (true) {
    const std::size_t part_start = pos;
    if (pos == last || list[pos] == ',')
      throw_hostlist_error(list, setting, pos, "empty range inside brackets");
    HostRange range;
    if (!is_digit(list[pos]))
      throw_hostlist_error(list, setting, pos,
                           fmt::format("'{}' is not a number or range", list[pos]));
    if (!parse_digits(list.substr(0, last), pos, range.lo))
      throw_hostlist_error(list, setting, part_start, "the number is too large");
    range.width = static_cast<int>(pos - part_start);
    range.hi = range.lo;
    if (pos < last && list[pos] == '-') {
      ++pos;
      if (pos == last || !is_digit(list[pos]))
        throw_hostlist_error(list, setting, pos, "the range has no upper bound");
      const std::size_t hi_start = pos;
      if (!parse_digits(list.substr(0, last), pos, range.hi))
        throw_hostlist_error(list, setting, hi_start, "the number is too large");
      if (range.hi < range.lo)
        throw_hostlist_error(
            list, setting, part_start,
            fmt::format("the range {}-{} is reversed (write the lower bound first)", range.lo,
                        range.hi));
    }
    if (pos < last && list[pos] != ',')
      throw_hostlist_error(list, setting, pos,
                           fmt::format("unexpected '{}' inside brackets (only digits, '-' "
                                       "and ',' may appear there)",
                                       list[pos]));
    const std::uint64_t size = range.hi - range.lo;  // + 1 below, checked against overflow
    if (size >= kMaxExpandedHosts || segment.count + size + 1 > kMaxExpandedHosts)
      throw_hostlist_error(list, setting, part_start,
                           fmt::format("it expands to more than {} hosts", kMaxExpandedHosts));
    segment.count += size + 1;
    segment.ranges.push_back(range);
    if (pos == last) break;
    ++pos;  // the ','
  }
  return segment;
}

inline bool is_forbidden_host_char(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  return u <= 0x20 || u == 0x7f;
}

/// One host expression between commas: its literal and bracket segments, and how many names
/// it expands to.
struct HostExpression {
  std::vector<HostSegment> segments;
  std::uint64_t combinations = 1;
};

/// The position of the ']' that closes the '[' at `open`.
inline std::size_t closing_bracket(std::string_view list, std::string_view setting,
                                   std::size_t open) {
  std::size_t close = open + 1;
  while (close < list.size() && list[close] != ']') {
    if (list[close] == '[') throw_hostlist_error(list, setting, close, "brackets cannot be nested");
    ++close;
  }
  if (close == list.size()) throw_hostlist_error(list, setting, open, "'[' without a matching ']'");
  return close;
}

/// Parses the host expression that starts at `pos`, up to the next ',' outside brackets or the
/// end of `list`, and leaves `pos` there.
inline HostExpression parse_host(std::string_view list, std::string_view setting,
                                 std::size_t& pos) {
  const std::size_t host_start = pos;
  HostExpression host;
  std::size_t literal_start = pos;
  auto flush_literal = [&] {
    if (pos > literal_start)
      host.segments.push_back({list.substr(literal_start, pos - literal_start), {}, 1});
  };
  while (pos < list.size() && list[pos] != ',') {
    const char c = list[pos];
    if (c == ']') throw_hostlist_error(list, setting, pos, "']' without a matching '['");
    if (is_forbidden_host_char(c))
      throw_hostlist_error(list, setting, pos, "whitespace or a control character");
    if (c != '[') {
      ++pos;
      continue;
    }
    flush_literal();
    const std::size_t close = closing_bracket(list, setting, pos);
    HostSegment bracket = parse_bracket(list, setting, pos + 1, close);
    if (host.combinations > kMaxExpandedHosts / bracket.count)
      throw_hostlist_error(list, setting, host_start,
                           fmt::format("it expands to more than {} hosts", kMaxExpandedHosts));
    host.combinations *= bracket.count;
    host.segments.push_back(std::move(bracket));
    pos = close + 1;
    literal_start = pos;
  }
  flush_literal();
  if (host.segments.empty()) throw_hostlist_error(list, setting, host_start, "empty host name");
  return host;
}

/// Parses every host expression of `list` and counts the names in `total`, so that the output
/// is bounded before anything is expanded.
inline std::vector<std::vector<HostSegment>> parse_hosts(std::string_view list,
                                                         std::string_view setting,
                                                         std::uint64_t& total) {
  std::vector<std::vector<HostSegment>> hosts;
  std::size_t pos = 0;
  while (true) {
    const std::size_t host_start = pos;
    HostExpression host = parse_host(list, setting, pos);
    total += host.combinations;
    if (total > kMaxExpandedHosts)
      throw_hostlist_error(list, setting, host_start,
                           fmt::format("it expands to more than {} hosts", kMaxExpandedHosts));
    hosts.push_back(std::move(host.segments));
    if (pos == list.size()) return hosts;
    ++pos;  // the ','
    if (pos == list.size()) throw_hostlist_error(list, setting, pos, "empty host name");
  }
}

/// The names of one host expression in order: an odometer over its brackets, the leftmost
/// varying slowest.
class HostOdometer {
 public:
  explicit HostOdometer(const std::vector<HostSegment>& segments)
      : segments_(segments), range_index_(segments.size(), 0), value_(segments.size(), 0) {
    for (std::size_t s = 0; s < segments.size(); ++s)
      if (!segments[s].ranges.empty()) value_[s] = segments[s].ranges[0].lo;
  }

  std::string name() const {
    std::string name;
    for (std::size_t s = 0; s < segments_.size(); ++s) {
      if (segments_[s].ranges.empty()) {
        name += segments_[s].text;
      } else {
        name += fmt::format("{:0{}}", value_[s], segments_[s].ranges[range_index_[s]].width);
      }
    }
    return name;
  }

  /// Advances the rightmost bracket, carrying to the left when it wraps; false when every
  /// bracket wrapped (all names were produced).
  bool advance() {
    std::size_t s = segments_.size();
    while (s-- > 0) {
      const auto& ranges = segments_[s].ranges;
      if (ranges.empty()) continue;
      if (value_[s] < ranges[range_index_[s]].hi) {
        ++value_[s];
        return true;
      }
      if (range_index_[s] + 1 < ranges.size()) {
        ++range_index_[s];
        value_[s] = ranges[range_index_[s]].lo;
        return true;
      }
      range_index_[s] = 0;
      value_[s] = ranges[0].lo;
    }
    return false;
  }

 private:
  const std::vector<HostSegment>& segments_;
  // Per bracket: which range and which value within it come next.
  std::vector<std::size_t> range_index_;
  std::vector<std::uint64_t> value_;
};

}  // namespace detail::slurm

inline std::vector<std::string> expand_hostlist(std::string_view list, std::string_view setting) {
  if (list.empty()) detail::slurm::throw_hostlist_error(list, setting, 0, "the list is empty");
  // Pass 1 parses every host expression and counts the names, so the output is bounded before
  // anything is expanded; pass 2 expands each expression.
  std::uint64_t total = 0;
  const auto hosts = detail::slurm::parse_hosts(list, setting, total);
  std::vector<std::string> names;
  names.reserve(static_cast<std::size_t>(total));
  for (const auto& segments : hosts) {
    detail::slurm::HostOdometer odometer(segments);
    do {
      names.push_back(odometer.name());
    } while (odometer.advance());
  }
  return names;
}

inline std::vector<int> expand_tasks_per_node(std::string_view counts, std::string_view setting) {
  using detail::slurm::throw_tasks_error;
  if (counts.empty()) throw_tasks_error(counts, setting, 0, "the list is empty");
  constexpr auto kMaxTotal = static_cast<std::uint64_t>(std::numeric_limits<int>::max());

  // Pass 1: validate and count, so the output is bounded before it is allocated.
  struct Item {
    std::uint64_t tasks;
    std::uint64_t repeat;
  };
  std::vector<Item> items;
  std::uint64_t nodes = 0;
  std::uint64_t total_tasks = 0;
  std::size_t pos = 0;
  while (true) {
    const std::size_t item_start = pos;
    if (pos == counts.size() || counts[pos] == ',')
      throw_tasks_error(counts, setting, pos, "empty item");
    Item item{0, 1};
    if (!detail::slurm::is_digit(counts[pos]))
      throw_tasks_error(counts, setting, pos,
                        fmt::format("'{}' where a task count was expected", counts[pos]));
    if (!detail::slurm::parse_digits(counts, pos, item.tasks) || item.tasks > kMaxTotal)
      throw_tasks_error(counts, setting, item_start, "the task count is too large");
    if (pos < counts.size() && counts[pos] == '(') {
      if (pos + 1 >= counts.size() || counts[pos + 1] != 'x')
        throw_tasks_error(counts, setting, pos + 1, "expected 'x' after '(' (write N(xM))");
      pos += 2;
      const std::size_t repeat_start = pos;
      if (pos == counts.size() || !detail::slurm::is_digit(counts[pos]))
        throw_tasks_error(counts, setting, pos, "expected a repeat count after '(x'");
      if (!detail::slurm::parse_digits(counts, pos, item.repeat))
        throw_tasks_error(counts, setting, repeat_start, "the repeat count is too large");
      if (item.repeat == 0) throw_tasks_error(counts, setting, repeat_start, "a repeat count of 0");
      if (pos == counts.size() || counts[pos] != ')')
        throw_tasks_error(counts, setting, pos, "expected ')' after the repeat count");
      ++pos;
    }
    if (pos < counts.size() && counts[pos] != ',')
      throw_tasks_error(
          counts, setting, pos,
          fmt::format("unexpected '{}' (items are N or N(xM), separated by ',')", counts[pos]));
    if (item.repeat > kMaxExpandedHosts - nodes)
      throw_tasks_error(counts, setting, item_start,
                        fmt::format("it describes more than {} nodes", kMaxExpandedHosts));
    nodes += item.repeat;
    // repeat <= 1e6 and tasks <= INT_MAX: the product fits 64 bits.
    if (item.tasks * item.repeat > kMaxTotal - total_tasks)
      throw_tasks_error(counts, setting, item_start,
                        fmt::format("it adds up to more than {} tasks", kMaxTotal));
    total_tasks += item.tasks * item.repeat;
    items.push_back(item);
    if (pos == counts.size()) break;
    ++pos;  // the ','
    if (pos == counts.size()) throw_tasks_error(counts, setting, pos, "empty item");
  }

  std::vector<int> per_node;
  per_node.reserve(static_cast<std::size_t>(nodes));
  for (const Item& item : items)
    per_node.insert(per_node.end(), static_cast<std::size_t>(item.repeat),
                    static_cast<int>(item.tasks));
  return per_node;
}

}  // namespace strata::cluster
