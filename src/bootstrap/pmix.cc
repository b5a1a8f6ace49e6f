// PmixSession: the few PMIx client calls the bootstrap needs (Init, Put, Commit, Fence, Get,
// Finalize). Without libpmix at build time the session cannot be opened and says so.
#include "bootstrap/pmix.h"

#include <cstdlib>
#include <string>

#include "fabflow/status.h"

#ifdef FABFLOW_HAVE_PMIX
#include <pmix.h>

#include <cstring>
#endif

namespace fabflow::bootstrap_detail {

bool pmix_launched() {
  const char* nspace = std::getenv("PMIX_NAMESPACE");
  const char* rank = std::getenv("PMIX_RANK");
  return nspace != nullptr && *nspace != '\0' && rank != nullptr && *rank != '\0';
}

#ifndef FABFLOW_HAVE_PMIX

bool pmix_built() { return false; }

struct PmixSession::State {};

PmixSession::PmixSession(std::chrono::milliseconds) {
  throw Error("bootstrap: this fabflow was built without PMIx (install libpmix-dev and rebuild)");
}
PmixSession::~PmixSession() = default;
int PmixSession::rank() const { return -1; }
std::uint32_t PmixSession::nodes() { return 0; }
void PmixSession::put(const std::string&, const std::string&) {}
void PmixSession::fence() {}
std::string PmixSession::get(int, const std::string&) { return ""; }

#else

bool pmix_built() { return true; }

namespace {

[[noreturn]] void fail(const char* what, pmix_status_t rc) {
  throw Error(std::string("bootstrap: PMIx ") + what + " failed: " + PMIx_Error_string(rc));
}

// Seconds for PMIX_TIMEOUT: at least one.
int timeout_seconds(std::chrono::milliseconds t) {
  return static_cast<int>(std::max<long long>(1, (t.count() + 999) / 1000));
}

}  // namespace

struct PmixSession::State {
  pmix_proc_t me{};
  int timeout_s = 1;
};

PmixSession::PmixSession(std::chrono::milliseconds timeout) : state_(std::make_unique<State>()) {
  state_->timeout_s = timeout_seconds(timeout);
  if (pmix_status_t rc = PMIx_Init(&state_->me, nullptr, 0); rc != PMIX_SUCCESS) fail("init", rc);
}

PmixSession::~PmixSession() { PMIx_Finalize(nullptr, 0); }

int PmixSession::rank() const { return static_cast<int>(state_->me.rank); }

std::uint32_t PmixSession::nodes() {
  pmix_proc_t job{};
  PMIX_LOAD_PROCID(&job, state_->me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* v = nullptr;
  if (pmix_status_t rc = PMIx_Get(&job, PMIX_NUM_NODES, nullptr, 0, &v); rc != PMIX_SUCCESS)
    fail("get of the job's node count", rc);
  std::uint32_t n = 0;
  if (v->type == PMIX_UINT32) n = v->data.uint32;
  PMIX_VALUE_RELEASE(v);
  if (n == 0) throw Error("bootstrap: PMIx gave no node count for this job");
  return n;
}

void PmixSession::put(const std::string& key, const std::string& value) {
  pmix_value_t v{};
  v.type = PMIX_STRING;
  v.data.string = const_cast<char*>(value.c_str());  // PMIx_Put copies it
  if (pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v); rc != PMIX_SUCCESS)
    fail("put", rc);
  if (pmix_status_t rc = PMIx_Commit(); rc != PMIX_SUCCESS) fail("commit", rc);
}

void PmixSession::fence() {
  pmix_proc_t all{};
  PMIX_LOAD_PROCID(&all, state_->me.nspace, PMIX_RANK_WILDCARD);
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool collect = true;
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &state_->timeout_s, PMIX_INT);
  const pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc != PMIX_SUCCESS) fail("fence", rc);
}

std::string PmixSession::get(int rank, const std::string& key) {
  pmix_proc_t from{};
  PMIX_LOAD_PROCID(&from, state_->me.nspace, static_cast<pmix_rank_t>(rank));
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &state_->timeout_s, PMIX_INT);
  pmix_value_t* v = nullptr;
  const pmix_status_t rc = PMIx_Get(&from, key.c_str(), &info, 1, &v);
  PMIX_INFO_DESTRUCT(&info);
  if (rc != PMIX_SUCCESS)
    fail(("get of " + key + " from rank " + std::to_string(rank)).c_str(), rc);
  std::string out;
  const bool is_string = v->type == PMIX_STRING && v->data.string != nullptr;
  if (is_string) out = v->data.string;
  PMIX_VALUE_RELEASE(v);
  if (!is_string)
    throw Error("bootstrap: PMIx value " + key + " of rank " + std::to_string(rank) +
                " is not a string");
  return out;
}

#endif

}  // namespace fabflow::bootstrap_detail
