// benchmarks/perf/output.hpp — where strata-perf's text goes: a file or stdout, and the progress
// line on stderr.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace strata::perf {

/// An output file, or stdout for "-"; closed on destruction.
class OutputFile {
 public:
  /// @throws CommandLineError when the file cannot be written.
  explicit OutputFile(const std::string& path);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();
  std::FILE* get() const noexcept { return file_; }

 private:
  std::FILE* file_ = nullptr;
  bool owned_ = false;
};

/// Writes `text` and flushes it: a sweep that fails half-way keeps the lines it wrote.
void write_flushed(std::FILE* file, const std::string& text);

/// "[all_reduce 16M 12/26] in-place" on stderr: rewritten in place on a terminal, one line
/// each otherwise (only with --progress).
class Progress {
 public:
  explicit Progress(bool forced, std::FILE* out = stderr);

  void show(std::string_view text);
  /// Clears the line before the table prints over the same terminal.
  void clear();

 private:
  std::FILE* out_;
  bool terminal_;
  bool enabled_;
};

}  // namespace strata::perf
