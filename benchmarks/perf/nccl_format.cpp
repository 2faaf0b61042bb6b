// benchmarks/perf/nccl_format.cpp — nccl-tests' sizes and table lines (nccl_format.hpp).
#include <perf/nccl_format.hpp>

#include <iterator>
#include <limits>

#include <fmt/format.h>

namespace strata::perf {

namespace {

// Digits from `pos` on, as an exact integer; false when it overflows.
bool parse_whole(std::string_view text, std::size_t& pos, std::uint64_t& whole, bool& any_digit) {
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    const auto digit = static_cast<std::uint64_t>(text[pos] - '0');
    if (whole > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return false;
    whole = whole * 10 + digit;
    any_digit = true;
    ++pos;
  }
  return true;
}

// A fraction is kept as numerator / 10^k so that "0.5K" is exactly 512; false for more digits
// than a byte count can need.
bool parse_fraction(std::string_view text, std::size_t& pos, std::uint64_t& fraction,
                    std::uint64_t& scale, bool& any_digit) {
  if (pos >= text.size() || text[pos] != '.') return true;
  ++pos;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    if (scale >= 1'000'000'000ULL) return false;
    fraction = fraction * 10 + static_cast<std::uint64_t>(text[pos] - '0');
    scale *= 10;
    any_digit = true;
    ++pos;
  }
  return true;
}

// The binary unit of the suffix at `pos` (1 without one); 0 for an unknown suffix.
std::uint64_t parse_unit(std::string_view text, std::size_t& pos) {
  if (pos >= text.size()) return 1;
  switch (text[pos++]) {
    case 'K':
    case 'k':
      return std::uint64_t{1} << 10;
    case 'M':
    case 'm':
      return std::uint64_t{1} << 20;
    case 'G':
    case 'g':
      return std::uint64_t{1} << 30;
    default:
      return 0;
  }
}

}  // namespace

std::optional<std::size_t> parse_size(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::size_t pos = 0;
  std::uint64_t whole = 0;
  std::uint64_t fraction = 0;
  std::uint64_t fraction_scale = 1;
  bool any_digit = false;
  if (!parse_whole(text, pos, whole, any_digit) ||
      !parse_fraction(text, pos, fraction, fraction_scale, any_digit) || !any_digit)
    return std::nullopt;
  const std::uint64_t unit = parse_unit(text, pos);
  if (unit == 0 || pos != text.size()) return std::nullopt;
  if (whole > std::numeric_limits<std::uint64_t>::max() / unit) return std::nullopt;
  const std::uint64_t fraction_bytes = fraction * unit;
  if (fraction_bytes % fraction_scale != 0) return std::nullopt;  // not a whole number of bytes
  const std::uint64_t bytes = whole * unit + fraction_bytes / fraction_scale;
  if (bytes < whole * unit || bytes > std::numeric_limits<std::size_t>::max()) return std::nullopt;
  return static_cast<std::size_t>(bytes);
}

std::string format_size(std::size_t bytes) {
  constexpr std::string_view kSuffixes[] = {"G", "M", "K"};
  constexpr int kShifts[] = {30, 20, 10};
  for (int i = 0; i < 3; ++i) {
    const std::size_t unit = std::size_t{1} << kShifts[i];
    if (bytes < unit) continue;
    if (bytes % unit == 0) return fmt::format("{}{}", bytes / unit, kSuffixes[i]);
    if ((bytes * 10) % unit == 0)
      return fmt::format("{:.1f}{}", static_cast<double>(bytes) / static_cast<double>(unit),
                         kSuffixes[i]);
  }
  return fmt::format("{}", bytes);
}

std::vector<std::size_t> sweep_sizes(std::size_t min_bytes, std::size_t max_bytes,
                                     std::size_t factor) {
  std::vector<std::size_t> sizes;
  if (min_bytes > max_bytes) return sizes;
  std::size_t size = min_bytes;
  while (true) {
    sizes.push_back(size);
    // A size of 0 never grows: one row, like a factor of 1.
    if (factor < 2 || size == 0 || size > max_bytes / factor) break;
    size *= factor;
  }
  return sizes;
}

std::string format_time_us(double microseconds) {
  if (microseconds >= 10000.0) return fmt::format("{:7.0f}", microseconds);
  if (microseconds >= 100.0) return fmt::format("{:7.1f}", microseconds);
  return fmt::format("{:7.2f}", microseconds);
}

std::string table_header() {
  std::string text;
  auto out = std::back_inserter(text);
  fmt::format_to(out,
                 "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                  "
                 "     in-place\n",
                 "", "", "", "", "");
  fmt::format_to(out,
                 "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  "
                 "{:>6} {:>6}\n",
                 "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong");
  fmt::format_to(out,
                 "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  "
                 "{:>6}  {:>5}\n",
                 "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                 "(GB/s)", "");
  return text;
}

std::string table_row(const Row& row) {
  std::string text = fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", row.bytes, row.count,
                                 row.type, row.redop, row.root);
  for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
    const std::string wrong = m->wrong ? fmt::format("{}", *m->wrong) : std::string("N/A");
    fmt::format_to(std::back_inserter(text), "  {}  {:6.2f}  {:6.2f}  {:>5}",
                   format_time_us(m->time_us), m->algbw_gbps, m->busbw_gbps, wrong);
  }
  text += '\n';
  return text;
}

std::string table_footer(std::int64_t out_of_bounds, double average_busbw_gbps) {
  return fmt::format("# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:g} \n#\n",
                     out_of_bounds, out_of_bounds != 0 ? "FAILED" : "OK", average_busbw_gbps);
}

}  // namespace strata::perf
