// The job store over PMIx: Init, Put, Commit, Fence, Get, Finalize. Without libpmix at build
// time it cannot be opened and says so.
#include <algorithm>
#include <string>

#include "bootstrap/job_store.h"
#include "fabflow/status.h"

#ifdef FABFLOW_HAVE_PMIX
#include <pmix.h>
#endif

namespace fabflow::bootstrap_detail {

#ifndef FABFLOW_HAVE_PMIX

bool pmix_built() { return false; }

std::unique_ptr<JobStore> open_pmix(std::chrono::milliseconds) {
  throw Error("bootstrap: this fabflow was built without PMIx (install libpmix-dev and rebuild)");
}

#else

bool pmix_built() { return true; }

namespace {

[[noreturn]] void fail(const std::string& what, pmix_status_t rc) {
  throw Error("bootstrap: PMIx " + what + " failed: " + PMIx_Error_string(rc));
}

class PmixStore final : public JobStore {
 public:
  explicit PmixStore(std::chrono::milliseconds timeout)
      // PMIX_TIMEOUT is in whole seconds; at least one.
      : timeout_s_(static_cast<int>(std::max<long long>(1, (timeout.count() + 999) / 1000))) {
    if (pmix_status_t rc = PMIx_Init(&me_, nullptr, 0); rc != PMIX_SUCCESS) fail("init", rc);
  }
  ~PmixStore() override { PMIx_Finalize(nullptr, 0); }

  const char* name() const override { return "PMIx"; }
  int rank() const override { return static_cast<int>(me_.rank); }

  std::uint32_t nodes() override {
    pmix_proc_t job{};
    PMIX_LOAD_PROCID(&job, me_.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t* v = nullptr;
    if (pmix_status_t rc = PMIx_Get(&job, PMIX_NUM_NODES, nullptr, 0, &v); rc != PMIX_SUCCESS)
      fail("get of the job's node count", rc);
    std::uint32_t n = 0;
    if (v->type == PMIX_UINT32) n = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    if (n == 0) throw Error("bootstrap: PMIx gave no node count for this job");
    return n;
  }

  void put(const std::string& key, const std::string& value) override {
    pmix_value_t v{};
    v.type = PMIX_STRING;
    v.data.string = const_cast<char*>(value.c_str());  // PMIx_Put copies it
    if (pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v); rc != PMIX_SUCCESS)
      fail("put of " + key, rc);
    if (pmix_status_t rc = PMIx_Commit(); rc != PMIX_SUCCESS) fail("commit", rc);
  }

  void fence() override {
    pmix_proc_t all{};
    PMIX_LOAD_PROCID(&all, me_.nspace, PMIX_RANK_WILDCARD);
    pmix_info_t info[2];
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    bool collect = true;
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout_s_, PMIX_INT);
    const pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS) fail("fence", rc);
  }

  std::string get(int rank, const std::string& key) override {
    pmix_proc_t from{};
    PMIX_LOAD_PROCID(&from, me_.nspace, static_cast<pmix_rank_t>(rank));
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout_s_, PMIX_INT);
    pmix_value_t* v = nullptr;
    const pmix_status_t rc = PMIx_Get(&from, key.c_str(), &info, 1, &v);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) fail("get of " + key + " from rank " + std::to_string(rank), rc);
    std::string out;
    const bool is_string = v->type == PMIX_STRING && v->data.string != nullptr;
    if (is_string) out = v->data.string;
    PMIX_VALUE_RELEASE(v);
    if (!is_string) {
      throw Error("bootstrap: PMIx value " + key + " of rank " + std::to_string(rank) +
                  " is not a string");
    }
    return out;
  }

 private:
  pmix_proc_t me_{};
  int timeout_s_;
};

}  // namespace

std::unique_ptr<JobStore> open_pmix(std::chrono::milliseconds timeout) {
  return std::make_unique<PmixStore>(timeout);
}

#endif

}  // namespace fabflow::bootstrap_detail
