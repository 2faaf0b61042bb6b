// benchmarks/perf/output.cpp — output files and the progress line (output.hpp).
#include <perf/output.hpp>

#include <cerrno>
#include <cstring>

#include <unistd.h>

#include <fmt/format.h>

#include <perf/options.hpp>

namespace strata::perf {

OutputFile::OutputFile(const std::string& path) {
  if (path == "-") {
    file_ = stdout;
    return;
  }
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr)
    throw CommandLineError(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
  owned_ = true;
}

OutputFile::~OutputFile() {
  if (owned_) std::fclose(file_);
}

void write_flushed(std::FILE* file, const std::string& text) {
  std::fputs(text.c_str(), file);
  std::fflush(file);
}

Progress::Progress(bool forced, std::FILE* out)
    : out_(out), terminal_(::isatty(::fileno(out)) != 0), enabled_(forced || terminal_) {}

void Progress::show(std::string_view text) {
  if (!enabled_) return;
  if (terminal_)
    fmt::print(out_, "\r{}\033[K", text);
  else
    fmt::print(out_, "{}\n", text);
  std::fflush(out_);
}

void Progress::clear() {
  if (!enabled_ || !terminal_) return;
  fmt::print(out_, "\r\033[K");
  std::fflush(out_);
}

}  // namespace strata::perf
