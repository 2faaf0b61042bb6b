// strata/cluster/address.hpp — where a task listens: "host:port", parsed strictly.
//
// Addresses are compared as text: "localhost:2222" and "127.0.0.1:2222" are different
// addresses (resolving names is the transport's business, and a cluster must not depend on
// DNS answers to be well formed).
#pragma once

#include <charconv>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include <strata/core/detail/escape.hpp>
#include <strata/core/detail/text_formatter.hpp>
#include <strata/core/error.hpp>

namespace strata::cluster {

/// Where one task listens: a host name, an IPv4 address or an IPv6 literal (stored without
/// brackets), and a port in [1, 65535].
struct Address {
  std::string host;
  std::uint16_t port = 0;

  /// "host:port", with an IPv6 literal in brackets: "[::1]:2222". `parse_address` reads it
  /// back to an equal `Address`.
  std::string to_string() const;

  friend bool operator==(const Address&, const Address&) = default;
  /// Lexicographic by host, then port: lets addresses key ordered containers.
  friend auto operator<=>(const Address&, const Address&) = default;
};

/// Parses "host:port" or "[ipv6]:port" (an IPv6 zone is allowed: "[fe80::1%eth0]:2222").
///
/// The host is a name or IPv4 address made of letters, digits, '-', '_' and '.' (at most 253
/// characters, not starting with '-' or '.', no empty label) or a bracketed IPv6 literal; the
/// port is decimal in [1, 65535]. Nothing else is accepted: no scheme, no spaces, no path.
///
/// @param setting what is being parsed, for the message ("MASTER_ADDR", "address", ...).
/// @throws ConfigurationError (rank -1, operation `setting`) quoting `text` when there is no
///   port, the host is empty or malformed, the port is not a number, is 0 or above 65535, or
///   anything follows the port.
/// Example: `parse_address("[::1]:80") == Address{"::1", 80}`.
inline Address parse_address(std::string_view text, std::string_view setting = "address");

}  // namespace strata::cluster

/// Formats as `Address::to_string()`: "host:2222", "[::1]:2222".
template <>
struct fmt::formatter<strata::cluster::Address> : strata::detail::TextFormatter {
  template <class FormatContext>
  auto format(const strata::cluster::Address& address, FormatContext& ctx) const {
    return write(address.to_string(), ctx);
  }
};

namespace strata::cluster {

// Helpers in their own namespace: sibling headers of cluster/ have detail helpers of their own.
namespace detail::spec {

inline constexpr std::string_view kAddressHint =
    "write host:port, e.g. 'worker-0.example.com:2222', '10.0.0.1:2222' or '[::1]:2222'";

using strata::detail::escaped;

// `text` escaped and between `quote`s; a cut text says how long it was.
inline std::string quote_text(std::string_view text, char quote = '\'') {
  constexpr std::size_t kMaxShown = 96;
  std::string out =
      fmt::format("{}{}{}", quote, escaped(text.substr(0, kMaxShown), kMaxShown), quote);
  if (text.size() > kMaxShown) out += fmt::format(" (cut, {} bytes in all)", text.size());
  return out;
}

constexpr bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}
constexpr bool is_alnum(char c) noexcept {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
constexpr bool is_hex(char c) noexcept {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
constexpr bool all_digits(std::string_view text) noexcept {
  if (text.empty()) return false;
  for (const char c : text) {
    if (!is_digit(c)) return false;
  }
  return true;
}

// Dotted-quad IPv4 (each part 0..255, 1 to 3 digits).
constexpr bool is_ipv4(std::string_view text) noexcept {
  int parts = 0;
  while (true) {
    const std::size_t dot = text.find('.');
    const std::string_view part = text.substr(0, dot);
    if (part.empty() || part.size() > 3 || !all_digits(part)) return false;
    int value = 0;
    for (const char c : part)
      value = value * 10 + (c - '0');
    if (value > 255) return false;
    ++parts;
    if (dot == std::string_view::npos) break;
    text.remove_prefix(dot + 1);
  }
  return parts == 4;
}

// An IPv6 literal as written between brackets: groups of 1-4 hex digits, at most one "::",
// an optional dotted IPv4 tail and an optional %zone.
constexpr bool is_ipv6(std::string_view text) noexcept {
  if (const std::size_t percent = text.find('%'); percent != std::string_view::npos) {
    const std::string_view zone = text.substr(percent + 1);
    if (zone.empty() || zone.size() > 64) return false;
    for (const char c : zone) {
      if (!is_alnum(c) && c != '-' && c != '_' && c != '.') return false;
    }
    text = text.substr(0, percent);
  }
  if (text.size() < 2 || text.size() > 45) return false;
  int groups = 0;
  bool compressed = false;
  std::size_t i = 0;
  if (text.starts_with("::")) {
    compressed = true;
    i = 2;
    if (i == text.size()) return true;
  } else if (text.front() == ':') {
    return false;
  }
  while (true) {
    std::size_t end = text.find(':', i);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view group = text.substr(i, end - i);
    if (group.empty()) return false;
    if (end == text.size() && group.find('.') != std::string_view::npos) {
      if (!is_ipv4(group)) return false;
      groups += 2;
    } else {
      if (group.size() > 4) return false;
      for (const char c : group) {
        if (!is_hex(c)) return false;
      }
      groups += 1;
    }
    if (end == text.size()) break;
    if (end + 1 < text.size() && text[end + 1] == ':') {
      if (compressed) return false;
      compressed = true;
      i = end + 2;
      if (i == text.size()) break;
    } else {
      i = end + 1;
      if (i == text.size()) return false;  // a single trailing ':'
    }
  }
  return compressed ? groups < 8 : groups == 8;
}

// Why `host` is not a usable host, or "" if it is. `host` is as stored in Address: an IPv6
// literal without brackets, anything else a name or IPv4 address.
inline std::string host_problem(std::string_view host) {
  if (host.empty()) return "the host is empty";
  if (host.find(':') != std::string_view::npos) {
    if (is_ipv6(host)) return "";
    return fmt::format("the host {} is not a valid name or IPv6 address", quote_text(host));
  }
  if (host.size() > 253)
    return fmt::format("the host is {} characters long (at most 253)", host.size());
  for (const char c : host) {
    if (!is_alnum(c) && c != '-' && c != '_' && c != '.')
      return fmt::format("the host contains {}", quote_text(std::string_view(&c, 1)));
  }
  if (host.front() == '-' || host.front() == '.')
    return fmt::format("the host starts with {}", quote_text(host.substr(0, 1)));
  if (host.find("..") != std::string_view::npos) return "the host has an empty label ('..')";
  return "";
}

// Parses `text` into `out`; returns why it is not an address, or "" on success.
inline std::string address_problem(std::string_view text, Address& out) {
  if (text.empty()) return "it is empty";
  std::string_view host;
  std::string_view rest;  // from the ':' before the port on
  if (text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return "'[' has no matching ']'";
    host = text.substr(1, close - 1);
    rest = text.substr(close + 1);
    if (host.empty()) return "the host is empty";
    if (!is_ipv6(host))
      return fmt::format("{} is not an IPv6 address (brackets are for IPv6 only)",
                         quote_text(host));
    if (rest.empty()) return "there is no port";
    if (rest.front() != ':')
      return fmt::format("{} follows ']' where ':port' should", quote_text(rest));
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return "there is no port";
    host = text.substr(0, colon);
    rest = text.substr(colon);
    if (host.find(':') != std::string_view::npos) {
      if (is_ipv6(host) || is_ipv6(text)) return "an IPv6 address needs brackets, as in [::1]:2222";
      return "there is more than one ':' outside brackets";
    }
    if (std::string problem = host_problem(host); !problem.empty()) return problem;
  }
  const std::string_view port_text = rest.substr(1);
  if (port_text.empty()) return "there is no port";
  if (!all_digits(port_text))
    return fmt::format("the port {} is not a decimal number", quote_text(port_text));
  std::uint32_t port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || port > 65535)
    return fmt::format("the port {} is above 65535", quote_text(port_text));
  if (port == 0) return "the port is 0 (a task needs a fixed port)";
  out.host.assign(host.data(), host.size());
  out.port = static_cast<std::uint16_t>(port);
  return "";
}

}  // namespace detail::spec

inline std::string Address::to_string() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

inline Address parse_address(std::string_view text, std::string_view setting) {
  Address address;
  if (std::string problem = detail::spec::address_problem(text, address); !problem.empty()) {
    throw ConfigurationError(
        -1, setting,
        fmt::format("cannot use {} as an address: {}", detail::spec::quote_text(text), problem),
        detail::spec::kAddressHint);
  }
  return address;
}

}  // namespace strata::cluster
