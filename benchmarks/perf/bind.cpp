// benchmarks/perf/bind.cpp — CPU affinity of the ranks (bind.hpp).
#include <perf/bind.hpp>

#include <sched.h>

#include <fmt/format.h>

namespace strata::perf {

namespace {

bool set_affinity(const std::vector<int>& cpus) noexcept {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (const int cpu : cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &mask);
  return ::sched_setaffinity(0, sizeof mask, &mask) == 0;
}

}  // namespace

std::string_view to_string(Binding binding) {
  return binding == Binding::core ? "core" : "none";
}

std::vector<int> allowed_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  return cpus;
}

std::optional<int> cpu_of_rank(Binding binding, int rank, int ranks, const std::vector<int>& cpus) {
  if (binding == Binding::none || cpus.empty() || rank < 0 || rank >= ranks) return std::nullopt;
  const std::size_t per_cpu = (static_cast<std::size_t>(ranks) + cpus.size() - 1) / cpus.size();
  return cpus[static_cast<std::size_t>(rank) / per_cpu];
}

bool bind_calling_thread(int cpu) noexcept {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return ::sched_setaffinity(0, sizeof one, &one) == 0;
}

WidenedAffinity::WidenedAffinity(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  std::vector<int> own = allowed_cpus();
  if (own.empty() || !set_affinity(cpus)) return;
  own_ = std::move(own);
}

WidenedAffinity::~WidenedAffinity() {
  if (!own_.empty()) set_affinity(own_);
}

std::string describe_cpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return "no CPU";
  std::string text = cpus.size() == 1 ? "CPU " : "CPUs ";
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
      ++j;
    if (i != 0) text += ',';
    text += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return text;
}

std::string describe_affinity() {
  return describe_cpus(allowed_cpus());
}

}  // namespace strata::perf
