// The resource manager's key-value store (PMIx), through which ranks started by mpirun or
// `srun --mpi=pmix` agree on rank 0's coordinator address and a fresh secret, with no FABFLOW_*
// variable set. The store is authenticated by the resource manager: only this job's processes
// read what rank 0 puts there.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace fabflow::bootstrap_detail {

// True when fabflow was built with libpmix (pkg-config pmix found at configure time).
bool pmix_built();

// True when a PMIx server started this process (PMIX_NAMESPACE and PMIX_RANK are set).
bool pmix_launched();

// This process's connection to the PMIx server, from PMIx_Init to PMIx_Finalize. Every call
// throws Error with one line naming the PMIx operation and its status.
class PmixSession {
 public:
  explicit PmixSession(std::chrono::milliseconds timeout);  // throws when !pmix_built()
  ~PmixSession();
  PmixSession(const PmixSession&) = delete;
  PmixSession& operator=(const PmixSession&) = delete;

  int rank() const;
  std::uint32_t nodes();  // nodes hosting this job

  // Publishes key=value for every process of the job (PMIx_Put, global scope, and Commit).
  void put(const std::string& key, const std::string& value);
  // Waits until every process of the job reached the fence, with the data collected.
  void fence();
  // The string `key` that process `rank` of this job published.
  std::string get(int rank, const std::string& key);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace fabflow::bootstrap_detail
