// libfabric, opened when fabflow first needs it.
//
// Debian's libfabric links the psm provider in, and psm's libinfinipath calibrates the CPU clock
// in a load-time constructor: hundreds of 125 us sleeps, about 0.2 s before main() in every
// process, which also gets its SIGSEGV, SIGINT and SIGTERM handlers. A process that never opens
// a fabric provider (the local transport, flag parsing, the socket baselines, reports, most unit
// tests) should pay none of that, so fabflow does not link libfabric. It opens the library with
// dlopen on first use and resolves the six functions it calls, each at the symbol version the
// linker would have bound when fabflow was built (CMakeLists.txt reads them from the library).
// The rest of libfabric's API is inline calls through the objects these return. Opening it
// leaves the process's signal handlers as they were.
// Thread-safe: the library is opened once, under std::call_once.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace fabflow::ofi::lib {

// Whether libfabric could be opened (once per process); `why` gets the loader's message if not.
bool available(std::string* why = nullptr);

// libfabric's fi_getinfo, fi_freeinfo, fi_dupinfo, fi_fabric and fi_version. All but freeinfo
// throw Error ("libfabric: cannot open libfabric.so.1: ...") when the library cannot be opened.
int getinfo(std::uint32_t version, const char* node, const char* service, std::uint64_t flags,
            const fi_info* hints, fi_info** info);
void freeinfo(fi_info* info) noexcept;
fi_info* dupinfo(const fi_info* info);
inline fi_info* allocinfo() { return dupinfo(nullptr); }
int fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
std::uint32_t version();
// fi_strerror, or "libfabric error N" when the library is not open.
std::string strerror(int errnum) noexcept;

}  // namespace fabflow::ofi::lib
