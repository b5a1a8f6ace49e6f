// The resource manager's key-value store for this job (PMIx or PMI2), through which ranks
// started by mpirun, `srun --mpi=pmix` or `srun --mpi=pmi2` agree on rank 0's coordinator
// address and a fresh secret, with no FABFLOW_* variable set. The store is the resource
// manager's: only this job's processes read what rank 0 puts there.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace fabflow::bootstrap_detail {

// This process's session with the store, from its Init to its Finalize. Every call throws
// Error with one line naming the interface, the operation and its status.
class JobStore {
 public:
  virtual ~JobStore() = default;
  virtual const char* name() const = 0;  // "PMIx", "PMI2"
  virtual int rank() const = 0;
  virtual std::uint32_t nodes() = 0;  // nodes hosting this job
  // Publishes key=value for every process of the job.
  virtual void put(const std::string& key, const std::string& value) = 0;
  // Waits until every process of the job reached the fence; puts before it are visible after.
  virtual void fence() = 0;
  // The string `key` that process `rank` of this job published.
  virtual std::string get(int rank, const std::string& key) = 0;
};

// The store a launcher offers this process: "pmix" (PMIX_NAMESPACE and PMIX_RANK set), "pmi2"
// (PMI_FD and PMI_RANK set, as by `srun --mpi=pmi2`), or "" for none.
std::string job_store_offered();

// True when fabflow was built with the library for `offered` ("pmix": libpmix, "pmi2":
// Slurm's libpmi2).
bool job_store_built(const std::string& offered);

// Opens the offered store (PMIx preferred). Throws Error when none is offered or built.
std::unique_ptr<JobStore> open_job_store(std::chrono::milliseconds timeout);

// The node count in a PMI process mapping such as "(vector,(0,2,4),(2,1,3))" (blocks of
// (first node, node count, processes per node); the highest node named, plus one); nullopt
// when the text is not one.
std::optional<std::uint32_t> nodes_in_process_mapping(std::string_view mapping);

// The stores themselves (pmix.cc, pmi2.cc); each throws when fabflow was built without it.
bool pmix_built();
bool pmi2_built();
std::unique_ptr<JobStore> open_pmix(std::chrono::milliseconds timeout);
std::unique_ptr<JobStore> open_pmi2();

}  // namespace fabflow::bootstrap_detail
