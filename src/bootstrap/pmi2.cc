// The job store over PMI2 (Slurm's libpmi2: `srun --mpi=pmi2`): Init, KVS_Put, KVS_Fence,
// KVS_Get, Finalize. PMI2 has no timeout: a rank that never reaches the fence is the launcher's
// to detect. Without libpmi2 at build time it cannot be opened and says so.
#include <cstring>
#include <string>

#include "bootstrap/job_store.h"
#include "fabflow/status.h"

#ifdef FABFLOW_HAVE_PMI2
#include <slurm/pmi2.h>
#endif

namespace fabflow::bootstrap_detail {

#ifndef FABFLOW_HAVE_PMI2

bool pmi2_built() { return false; }

std::unique_ptr<JobStore> open_pmi2() {
  throw Error("bootstrap: this fabflow was built without PMI2 (install libpmi2-0-dev and rebuild)");
}

#else

bool pmi2_built() { return true; }

namespace {

void check(const std::string& what, int rc) {
  if (rc != PMI2_SUCCESS)
    throw Error("bootstrap: PMI2 " + what + " failed (error " + std::to_string(rc) + ")");
}

class Pmi2Store final : public JobStore {
 public:
  Pmi2Store() {
    int spawned = 0, size = 0, appnum = 0;
    check("init", PMI2_Init(&spawned, &size, &rank_, &appnum));
  }
  ~Pmi2Store() override { PMI2_Finalize(); }

  const char* name() const override { return "PMI2"; }
  int rank() const override { return rank_; }

  std::uint32_t nodes() override {
    char mapping[PMI2_MAX_VALLEN + 1] = {};
    int found = 0;
    check("job attribute PMI_process_mapping",
          PMI2_Info_GetJobAttr("PMI_process_mapping", mapping, PMI2_MAX_VALLEN, &found));
    const auto n = found ? nodes_in_process_mapping(mapping) : std::nullopt;
    if (!n) {
      throw Error(std::string("bootstrap: PMI2 gave no usable process mapping (") +
                  (found ? mapping : "none") + ")");
    }
    return *n;
  }

  void put(const std::string& key, const std::string& value) override {
    if (key.size() >= PMI2_MAX_KEYLEN || value.size() >= PMI2_MAX_VALLEN)
      throw Error("bootstrap: PMI2 put of " + key + ": key or value too long");
    check("put of " + key, PMI2_KVS_Put(key.c_str(), value.c_str()));
  }

  void fence() override { check("fence", PMI2_KVS_Fence()); }

  std::string get(int rank, const std::string& key) override {
    char value[PMI2_MAX_VALLEN + 1] = {};
    int len = 0;
    check("get of " + key + " from rank " + std::to_string(rank),
          PMI2_KVS_Get(nullptr, rank, key.c_str(), value, PMI2_MAX_VALLEN, &len));
    if (len < 0 || len > PMI2_MAX_VALLEN) {
      throw Error("bootstrap: PMI2 value " + key + " of rank " + std::to_string(rank) +
                  " has length " + std::to_string(len));
    }
    // Whether the length counts a terminating NUL differs between servers: stop at the first.
    return std::string(value, ::strnlen(value, static_cast<std::size_t>(len)));
  }

 private:
  int rank_ = -1;
};

}  // namespace

std::unique_ptr<JobStore> open_pmi2() { return std::make_unique<Pmi2Store>(); }

#endif

}  // namespace fabflow::bootstrap_detail
