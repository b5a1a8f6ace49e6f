// `fabflow doctor`: the checks that decide whether fabflow will run, and run well, on this
// host, each ok / warn / fail / n/a with a one-line fix. What can be tried is tried (a
// userfaultfd, a cross-memory read of a child, a loopback connection), not guessed from
// versions. Exit status 1 when a check fails. docs/portability.md, "fabflow doctor".
// The checks themselves are src/tools/doctor.cc; here are the flags and the printing.
#include <fabflow/version.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/shm_regions.h"
#include "tools/doctor.h"

namespace fabflow::cli {
namespace {

using tools::mib;

int run_doctor(bool json) {
  const std::vector<tools::Check> checks = tools::check_host();
  int failed = 0;
  for (const auto& c : checks) failed += c.status == "fail";
  if (json) {
    nlohmann::json j = {{"type", "doctor"},
                        {"fabflow_version", FABFLOW_VERSION},
                        {"failed", failed},
                        {"checks", nlohmann::json::array()}};
    for (const auto& c : checks)
      j["checks"].push_back(
          {{"check", c.name}, {"status", c.status}, {"detail", c.detail}, {"fix", c.fix}});
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "# fabflow " << FABFLOW_VERSION << " doctor: what decides whether fabflow runs "
              << "(and runs well) on this host\n\n";
    for (const auto& c : checks) {
      std::printf("%-26s %-5s %s\n", c.name.c_str(), c.status.c_str(), c.detail.c_str());
      if (!c.fix.empty() && c.status != "ok")
        std::printf("%-26s       fix: %s\n", "", c.fix.c_str());
    }
    std::cout << "\n" << failed << " check(s) failed\n";
  }
  return failed > 0 ? 1 : 0;
}

int run_clean(bool dry_run, bool json) {
  const auto left = find_shm_leftovers();
  std::vector<std::string> errors;
  std::uint64_t freed = 0, found = 0;
  for (const auto& l : left) found += l.bytes;
  if (!dry_run) freed = remove_shm_leftovers(left, errors);
  if (json) {
    nlohmann::json j = {
        {"type", "clean"},      {"dry_run", dry_run},   {"regions", nlohmann::json::array()},
        {"bytes_found", found}, {"bytes_freed", freed}, {"errors", errors}};
    for (const auto& l : left)
      j["regions"].push_back(
          {{"path", "/dev/shm/" + l.name}, {"owner", l.owner}, {"bytes", l.bytes}, {"why", l.why}});
    std::cout << j.dump() << "\n";
  } else {
    for (const auto& l : left)
      std::cout << (dry_run ? "would remove " : "removed ") << "/dev/shm/" << l.name << " ("
                << mib(l.bytes) << ", pid " << l.owner << ": " << l.why << ")\n";
    for (const auto& e : errors) std::cerr << "fabflow clean: " << e << "\n";
    std::cout << (dry_run ? "would free " : "freed ") << mib(dry_run ? found : freed) << " in "
              << left.size() - errors.size() << " region(s) of dead ranks\n";
  }
  return errors.empty() ? 0 : 1;
}

}  // namespace

void add_clean(CLI::App& app, Runner& run) {
  auto* c = app.add_subcommand(
      "clean", "remove the /dev/shm regions of dead ranks (those whose owner is gone)");
  auto dry_run = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  c->add_flag("-n,--dry-run", *dry_run, "list what would be removed, remove nothing");
  c->add_flag("--json", *json, "one JSON object");
  c->callback(
      [&run, dry_run, json] { run = [dry_run, json] { return run_clean(*dry_run, *json); }; });
}

void add_doctor(CLI::App& app, Runner& run) {
  auto* d = app.add_subcommand(
      "doctor", "check this host: libfabric, devices, memlock, /dev/shm, CPUs, launcher");
  auto json = std::make_shared<bool>(false);
  d->add_flag("--json", *json, "one JSON object");
  d->callback([&run, json] { run = [json] { return run_doctor(*json); }; });
}

}  // namespace fabflow::cli
