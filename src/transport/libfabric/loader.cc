#include "transport/libfabric/loader.h"

#include <fabflow/status.h>

#include <dlfcn.h>
#include <signal.h>

#include <array>
#include <mutex>

// Set by CMakeLists.txt from the library fabflow was built against.
#ifndef FABFLOW_LIBFABRIC_SONAME
#define FABFLOW_LIBFABRIC_SONAME "libfabric.so.1"
#endif

namespace fabflow::ofi::lib {
namespace {

struct Api {
  decltype(&::fi_getinfo) getinfo = nullptr;
  decltype(&::fi_freeinfo) freeinfo = nullptr;
  decltype(&::fi_dupinfo) dupinfo = nullptr;
  decltype(&::fi_fabric) fabric = nullptr;
  decltype(&::fi_version) version = nullptr;
  decltype(&::fi_strerror) strerror = nullptr;
  std::string error;  // empty once every function is resolved
};

// The symbol at the version the build's library marks as default (CMakeLists.txt stops when it
// cannot read one; the empty version, any version, is for a build without those definitions).
template <class F>
bool resolve(void* handle, const char* name, const char* version, F& out, std::string& error) {
  void* p = *version ? dlvsym(handle, name, version) : dlsym(handle, name);
  if (!p) {
    error = std::string("libfabric: ") + FABFLOW_LIBFABRIC_SONAME + " has no " + name +
            (*version ? std::string("@") + version : std::string());
    return false;
  }
  out = reinterpret_cast<F>(p);
  return true;
}

#ifndef FABFLOW_FI_VERSION_getinfo
#define FABFLOW_FI_VERSION_getinfo ""
#define FABFLOW_FI_VERSION_freeinfo ""
#define FABFLOW_FI_VERSION_dupinfo ""
#define FABFLOW_FI_VERSION_fabric ""
#define FABFLOW_FI_VERSION_version ""
#define FABFLOW_FI_VERSION_strerror ""
#endif

// The signals whose handlers libinfinipath installs when it is loaded (unless
// IPATH_NO_BACKTRACE is set). Loaded before main, its handlers were replaced by any the program
// set later; loaded at run time, they would replace the program's own, so this puts back
// what was there.
constexpr std::array kLibraryHandledSignals{SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT, SIGTERM};

void* open_keeping_signal_handlers(const char* soname) {
  std::array<struct sigaction, kLibraryHandledSignals.size()> saved{};
  for (std::size_t i = 0; i < saved.size(); ++i)
    ::sigaction(kLibraryHandledSignals[i], nullptr, &saved[i]);
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  for (std::size_t i = 0; i < saved.size(); ++i)
    ::sigaction(kLibraryHandledSignals[i], &saved[i], nullptr);
  return h;
}

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    // Never closed: libfabric's objects live until the process ends.
    void* h = open_keeping_signal_handlers(FABFLOW_LIBFABRIC_SONAME);
    if (!h) {
      const char* e = dlerror();
      a.error = std::string("libfabric: cannot open ") + FABFLOW_LIBFABRIC_SONAME + ": " +
                (e ? e : "unknown error");
      return;
    }
    std::string error;
    if (resolve(h, "fi_getinfo", FABFLOW_FI_VERSION_getinfo, a.getinfo, error) &&
        resolve(h, "fi_freeinfo", FABFLOW_FI_VERSION_freeinfo, a.freeinfo, error) &&
        resolve(h, "fi_dupinfo", FABFLOW_FI_VERSION_dupinfo, a.dupinfo, error) &&
        resolve(h, "fi_fabric", FABFLOW_FI_VERSION_fabric, a.fabric, error) &&
        resolve(h, "fi_version", FABFLOW_FI_VERSION_version, a.version, error) &&
        resolve(h, "fi_strerror", FABFLOW_FI_VERSION_strerror, a.strerror, error))
      return;
    a = Api{};
    a.error = error;
  });
  return a;
}

const Api& loaded() {
  const Api& a = api();
  if (!a.error.empty()) throw Error(a.error);
  return a;
}

}  // namespace

bool available(std::string* why) {
  const Api& a = api();
  if (!a.error.empty() && why) *why = a.error;
  return a.error.empty();
}

int getinfo(std::uint32_t version, const char* node, const char* service, std::uint64_t flags,
            const fi_info* hints, fi_info** info) {
  return loaded().getinfo(version, node, service, flags, hints, info);
}

void freeinfo(fi_info* info) noexcept {
  // A list exists only if getinfo or dupinfo opened the library.
  if (info) api().freeinfo(info);
}

fi_info* dupinfo(const fi_info* info) { return loaded().dupinfo(info); }

int fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  return loaded().fabric(attr, fabric, context);
}

std::uint32_t version() { return loaded().version(); }

std::string strerror(int errnum) noexcept {
  const Api& a = api();
  if (a.strerror) return a.strerror(errnum);
  return "libfabric error " + std::to_string(errnum);
}

}  // namespace fabflow::ofi::lib
